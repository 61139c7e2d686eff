package chaos

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// Config is one point of the matrix every schedule runs on: how the relay
// orders what it publishes, where the binlog path publishes, and which kind
// of outbox table it reads. The flavour (MariaDB 10.11, MySQL 9.7) is the
// test binary's (RELAY_TEST_FLAVOR).
type Config struct {
	// Ordering: relaxed (one channel), strict (the stream holds on a
	// failed row), lanes4 (relaxed over four confirming channels by key).
	Ordering string `json:"ordering"`
	// Stream: the binlog path publishes into a RabbitMQ stream
	// (broker.stream) instead of the tables' exchanges.
	Stream bool `json:"stream"`
	// Table: status (preset producer-message, marked SENT, swept),
	// statusless (preset debezium: nothing written back, not swept), or
	// tenants (status tables: the outbox table and seven tenant tables
	// matched by a pattern entry, each transaction's rows spread over
	// them, so a batch of marks names more tables than
	// relay.mark_sessions and the relay keeps some for a later batch).
	Table string `json:"table"`
}

var (
	orderings = []string{"relaxed", "strict", "lanes4"}
	tables    = []string{"status", "statusless", "tenants"}
)

// String is the configuration as CONFIG= takes it: relaxed/queue/status.
func (c Config) String() string {
	to := "queue"
	if c.Stream {
		to = "stream"
	}
	return c.Ordering + "/" + to + "/" + c.Table
}

// Lanes is relay.lanes.
func (c Config) Lanes() int {
	if c.Ordering == "lanes4" {
		return 4
	}
	return 1
}

// Status is true for the tables with a status column.
func (c Config) Status() bool { return c.Table == "status" || c.Table == "tenants" }

// Tenants is true when rows spread over the tenant tables too.
func (c Config) Tenants() bool { return c.Table == "tenants" }

// tenantTables are the tables the tenants configuration adds beside the
// outbox table, in its database; the pattern "tenant_?" matches them.
var tenantTables = []string{"tenant_1", "tenant_2", "tenant_3", "tenant_4", "tenant_5", "tenant_6", "tenant_7"}

// Matrix is every configuration.
func Matrix() []Config {
	var out []Config
	for _, o := range orderings {
		for _, s := range []bool{false, true} {
			for _, t := range tables {
				out = append(out, Config{Ordering: o, Stream: s, Table: t})
			}
		}
	}
	return out
}

// ParseConfig reads relaxed/queue/status and the like.
func ParseConfig(s string) (Config, error) {
	for _, c := range Matrix() {
		if c.String() == s {
			return c, nil
		}
	}
	var names []string
	for _, c := range Matrix() {
		names = append(names, c.String())
	}
	return Config{}, fmt.Errorf("CONFIG %q is none of %s", s, strings.Join(names, ", "))
}

// Profile says how long a drawn schedule runs and how long its faults
// last: short for make test (seconds), long for make chaos (minutes; faults
// that outlast the broker's heartbeat and the stream lane's confirm
// timeout, Redis topologies and the RabbitMQ cluster).
type Profile struct {
	Name     string `json:"name"`
	Long     bool   `json:"long"`
	Topology bool   `json:"topology"` // Redis Sentinel, Redis Cluster: shared, locked (testenv.LockRedisTopologies)
	Rabbit   bool   `json:"rabbit"`   // the three-node RabbitMQ cluster (scripts/stack.sh rabbit-cluster)
}

var (
	shortProfile = Profile{Name: "short"}
	longProfile  = Profile{Name: "long", Long: true, Topology: true}
)

// Planned is one fault of a schedule.
type Planned struct {
	At   time.Duration `json:"at"`   // after the writer starts
	Kind string        `json:"kind"` // a catalogue name
	Hold time.Duration `json:"hold"` // how long it lasts before it is recovered
	Arg  int           `json:"arg"`  // the kind's own choice (the faults_*_test.go files)
}

func (p Planned) String() string {
	s := fmt.Sprintf("%s@%s", p.Kind, p.At.Round(100*time.Millisecond))
	if p.Hold > 0 {
		s += fmt.Sprintf("(%s)", p.Hold.Round(100*time.Millisecond))
	}
	return s
}

// Traffic is the shape of the writer's transactions: each share is a
// probability per transaction.
type Traffic struct {
	Rate     int     `json:"rate"` // rows per second
	MaxRows  int     `json:"max_rows"`
	Update   float64 `json:"update"`   // an UPDATE of its own rows before the commit (the body committed is not the one inserted)
	Cancel   float64 `json:"cancel"`   // a row of it moved to a status that is not publishable (status tables)
	Delete   float64 `json:"delete"`   // a row of it deleted before the commit (status-less tables: the Debezium pattern)
	Rollback float64 `json:"rollback"` // rolled back
	XA       float64 `json:"xa"`       // an XA branch, prepared and committed (or rolled back) a few transactions later
	Large    float64 `json:"large"`    // 500 to 3,000 rows
	Poison   float64 `json:"poison"`   // a row routed to an exchange that does not exist (relaxed status tables into exchanges): ends FAILED
	Decoy    float64 `json:"decoy"`    // a row in a table whose name differs from the outbox's in case only: never published
	// PartialJSON: the writer's session logs its UPDATEs as JSON diffs
	// (binlog_row_value_options=PARTIAL_JSON, MySQL, status-less tables).
	PartialJSON bool `json:"partial_json,omitempty"`
	// Payload is the bytes of body each row inserts, its pad field filled
	// up to it with no draw of its own (a body the drawn pad makes longer
	// stays as it is). 0 keeps the drawn bodies, of a few hundred bytes.
	// Draw never sets it; a named scenario does, when a window of messages
	// must outweigh the buffers between the relay and the broker.
	Payload int `json:"payload,omitempty"`
}

// Schedule is one run: a configuration, a topology, the traffic and the
// faults, all drawn from the seed (Draw), or written out by hand for a
// named scenario (scenarios_test.go).
type Schedule struct {
	Name     string        `json:"name,omitempty"` // a named scenario's
	Seed     uint64        `json:"seed"`
	Config   Config        `json:"config"`
	Profile  Profile       `json:"profile"`
	Flavor   string        `json:"flavor"`
	Relays   int           `json:"relays"` // 2: a leader and a standby (ha.enabled); 1: one relay, no lease
	Redis    string        `json:"redis"`  // single (the run's own, behind a proxy), sentinel, cluster
	Broker   string        `json:"broker"` // single (the flavour's, behind a proxy), cluster (three nodes, quorum queue)
	Duration time.Duration `json:"duration"`
	Traffic  Traffic       `json:"traffic"`
	Faults   []Planned     `json:"faults"`
}

// Replay is the command that runs this schedule again.
func (s Schedule) Replay() string {
	if s.Name != "" {
		return fmt.Sprintf("make chaos SCENARIO=%s FLAVOR=%s", s.Name, s.Flavor)
	}
	return fmt.Sprintf("make chaos SEED=%d CONFIG=%s PROFILE=%s FLAVOR=%s", s.Seed, s.Config, s.Profile.Name, s.Flavor)
}

// FaultNames lists the faults in order, for the one-line summary.
func (s Schedule) FaultNames() string {
	names := make([]string, len(s.Faults))
	for i, p := range s.Faults {
		names[i] = p.String()
	}
	return strings.Join(names, " ")
}

// Draw builds the schedule of seed on configuration c: the same seed,
// configuration, profile and flavour give the same schedule, whatever the
// machine does while it runs.
func Draw(seed uint64, c Config, p Profile, flavor string) Schedule {
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	s := Schedule{Seed: seed, Config: c, Profile: p, Flavor: flavor, Relays: 2, Redis: "single", Broker: "single"}
	s.Duration = 30 * time.Second
	if p.Long {
		s.Duration = time.Duration(60+rng.IntN(91)) * time.Second
		if rng.IntN(5) == 0 {
			s.Relays = 1
		}
		if p.Topology {
			switch rng.IntN(6) {
			case 0:
				s.Redis = "sentinel"
			case 1:
				s.Redis = "cluster"
			}
		}
		if p.Rabbit && !c.Stream && rng.IntN(4) == 0 {
			s.Broker = "cluster"
		}
	}
	t := Traffic{Rate: 100 + 50*rng.IntN(7), MaxRows: 1 + rng.IntN(8), Update: 0.15, Rollback: 0.05, XA: 0.04, Large: 0.002}
	if p.Long {
		t.Large = 0.005
	}
	if c.Status() {
		t.Cancel = 0.03
		if c.Ordering != "strict" { // strict holds the stream on a row that cannot be routed, for good
			t.Poison = []float64{0, 0.01, 0.03}[rng.IntN(3)]
		}
	} else {
		t.Delete = 0.1
	}
	// What the relay sustains, measured: strict ordering has one message
	// in flight, and a stream lane took about 150 rows/s in transactions of
	// a few rows (MySQL 9.7, RabbitMQ 4.3). A writer that outruns it builds
	// a backlog older than the sweeper's grace period, and the sweeper then
	// sends rows the binlog path sends too: duplicates the docs allow
	// (docs/lifecycle.md, "Duplicates"), charged to whatever fault came
	// last. (The draw is the same; only the rate is capped.)
	if c.Stream {
		t.Rate = min(t.Rate, 150)
		// Into a stream every row goes to the stream, whatever its exchange
		// column says (docs/configuration.md, broker.stream.name): a row
		// routed nowhere is not poison there. (Drawn all the same.)
		t.Poison = 0
	}
	if c.Ordering == "strict" {
		t.Rate = min(t.Rate, 200)
	}
	if !p.Long {
		// A row that fails is retried by the sweeper, which waits its grace
		// period (60 s) from the row's creation: longer than make test's
		// schedules. (Drawn all the same, so the draws that follow are the
		// long profile's.)
		t.Poison = 0
	}
	s.Traffic = t

	// Faults one after another: each begins a few seconds after the one
	// before was recovered, so that what follows can be charged to it.
	var kinds []string
	for _, f := range catalogue {
		if f.Available(&s) {
			kinds = append(kinds, f.Name())
		}
	}
	at := time.Duration(2000+rng.IntN(4000)) * time.Millisecond
	for at < s.Duration-5*time.Second {
		f := byName(kinds[rng.IntN(len(kinds))])
		lo, hi := f.Hold(&s)
		hold := lo
		if hi > lo {
			hold += time.Duration(rng.Int64N(int64(hi - lo)))
		}
		hold = hold.Round(100 * time.Millisecond)
		if at+hold > s.Duration-3*time.Second {
			break // the writer stops soon: no fault outlasts it
		}
		s.Faults = append(s.Faults, Planned{At: at, Kind: f.Name(), Hold: hold, Arg: rng.IntN(1 << 16)})
		gap := time.Duration(2000+rng.IntN(3000)) * time.Millisecond
		if p.Long {
			gap = time.Duration(4000+rng.IntN(6000)) * time.Millisecond
		}
		at += hold + gap
	}
	return s
}

// kindsOf lists the kinds of faults a set of schedules draws, sorted.
func kindsOf(ss []Schedule) []string {
	var out []string
	for _, s := range ss {
		for _, p := range s.Faults {
			if !slices.Contains(out, p.Kind) {
				out = append(out, p.Kind)
			}
		}
	}
	slices.Sort(out)
	return out
}
