package chaos

import (
	"encoding/json"
	"sort"
	"time"
)

// History is everything one schedule did and saw, the only input of the
// checker: the writer's transactions (committed, rolled back, or of an
// outcome the end state settles), every delivery of the queue and the
// stream consumers, every fault with when it began and ended, and the
// outbox tables as they were once the run had drained. A failed run writes
// it out whole (writeArtifacts), as etcd's robustness tests keep theirs.
type History struct {
	Schedule   Schedule          `json:"schedule"`
	Start      time.Time         `json:"start"`
	Txs        []Tx              `json:"txs"`
	Deliveries []Delivery        `json:"deliveries"`
	Faults     []FaultEvent      `json:"faults"`
	End        map[string]EndRow `json:"end"`   // by message id; status tables only
	Table      string            `json:"table"` // the outbox table's name (the others in End are archives, or tenants)
	// Tenants are the tenant tables the relay reads too (the tenants
	// configuration): live tables, not archives.
	Tenants []string `json:"tenants,omitempty"`
	Journal []string `json:"journal"`
	// Woken are the leaders paused past their lease, each with what it
	// published in the seconds after SIGCONT (counted at its own proxy).
	Woken []Woken `json:"woken,omitempty"`
}

// Woken is a leader deposed while paused, woken again.
type Woken struct {
	Relay     int       `json:"relay"`
	At        time.Time `json:"at"`    // SIGCONT
	Until     time.Time `json:"until"` // the end of the window counted
	Publishes int       `json:"publishes"`
}

// Outcome is what became of a transaction.
type Outcome string

const (
	Committed  Outcome = "committed"
	RolledBack Outcome = "rolled-back"
	// Unknown is a commit whose answer was lost (the connection dropped):
	// the end state settles it where it can (resolve).
	Unknown Outcome = "unknown"
)

// Expect is what must become of a row version that committed.
type Expect string

const (
	Deliver Expect = "deliver" // delivered, as committed
	Fail    Expect = "fail"    // routed nowhere: ends FAILED with a reason, never delivered
	Never   Expect = "never"   // not publishable at commit (cancelled in its transaction, another table): never delivered
	// Later: re-queued for later (a next_retry_time hours ahead): the
	// sweeper's when due, the binlog path's at once if route.time_zone
	// reads the time as past. Not judged but for drafts.
	Later Expect = "later"
)

// Tx is one transaction of the writer, in the order the writer committed
// them (one connection commits at a time, so this is the commit order; an
// XA branch takes its place at XA COMMIT).
type Tx struct {
	Seq     int       `json:"seq"`
	Kind    string    `json:"kind"`
	At      time.Time `json:"at"` // when its COMMIT (ROLLBACK) returned
	Outcome Outcome   `json:"outcome"`
	Rows    []Row     `json:"rows"`
}

// Row is one version of one outbox row as a transaction left it: an insert
// is version 0, each re-queue the next version.
type Row struct {
	ID      string `json:"id"` // the AMQP message id
	Key     string `json:"key"`
	Version int    `json:"v"`
	Body    string `json:"body"` // as committed
	Expect  Expect `json:"expect"`
	// Gone: deleted in its own transaction (the Debezium pattern): there is
	// no row at the end, the insert is still the message.
	Gone bool `json:"gone,omitempty"`
}

// Delivery is one message a consumer received.
type Delivery struct {
	Src  string    `json:"src"` // queue or stream
	N    int       `json:"n"`   // its place among its source's deliveries
	ID   string    `json:"id"`
	Body string    `json:"body"`
	At   time.Time `json:"at"`
	// Redelivered is the broker's flag: the consumer's own connection
	// dropped before its ack. Not the relay's doing, not counted.
	Redelivered bool `json:"redelivered,omitempty"`
}

// FaultEvent is one fault as it happened.
type FaultEvent struct {
	Kind   string    `json:"kind"`
	Detail string    `json:"detail"`
	Start  time.Time `json:"start"`
	End    time.Time `json:"end"`
	Bound  int       `json:"bound"` // duplicates the docs allow for it (catalogue_test.go)
}

// EndRow is a row of a status table at the end of the run.
type EndRow struct {
	Table  string `json:"table"`
	Status string `json:"status"`
	Error  string `json:"error,omitempty"`
}

// normalize makes two renderings of one JSON document compare equal (MySQL
// stores a JSON column in its binary format and gives back its own text);
// anything else is compared as it is.
func normalize(body string) string {
	var v any
	if json.Unmarshal([]byte(body), &v) != nil {
		return body
	}
	b, err := json.Marshal(v) // map keys sorted
	if err != nil {
		return body
	}
	return string(b)
}

// sortedDeliveries returns the deliveries by source and place.
func sortedDeliveries(ds []Delivery) []Delivery {
	out := append([]Delivery(nil), ds...)
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Src != out[j].Src {
			return out[i].Src < out[j].Src
		}
		return out[i].N < out[j].N
	})
	return out
}
