// Command bench measures binlog-relay against a polling outbox relay on one
// stack, in one run: the broker's own publish ceiling, backlog drain,
// commit-to-delivery latency at a fixed rate, statements sent to the primary,
// the effect of table size, and the relay's memory. It prints one
// `name value unit` line per figure, then a short table. See bench/README.md.
//
// Everything it creates (a database, an exchange and queue, checkpoint keys)
// has a unique name and is removed at the end.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
)

// options are the flags. Defaults are the local stack (scripts/stack.sh):
// the servers and broker of the flavour RELAY_TEST_FLAVOR names (testenv;
// each RELAY_TEST_*_DSN, RELAY_TEST_AMQP_URL and RELAY_TEST_REDIS_ADDR
// overrides its address), and the figures issue 7 asks for.
type options struct {
	primaryDSN    string
	replicaDSN    string
	extraReplicas []string
	amqpURL       string
	redisAddr     string
	relayBin      string
	relayYAML     string
	brokerWindow  int
	relayEnv      []string
	tableYAML     string

	brokerMsgs    int
	backlog       int
	rate          int
	killRate      int
	kills         int
	killDuration  time.Duration
	duration      time.Duration
	idle          time.Duration
	scaleSizes    []int
	scaleDuration time.Duration
	pollIntervals []time.Duration
	scalePoll     time.Duration
	pollBatch     int
	pollEager     bool
	bigTx         int
	payloadRows   int
	payload       int
	reconcileRows int
	lanesBacklog  int
	lanesKeys     int
	// The tenants step (tenants.go).
	tenants              int
	tenantsRows          int
	tenantsTxRows        int
	tenantsNoisyTx       int
	tenantsQuietRate     int
	tenantsQuietDuration time.Duration
	tenantsIdleIntervals int
	tenantsSweep         time.Duration
	phases               map[string]bool
	keep                 bool
	latencyTrace         string
	noConsumer           bool // BenchmarkRelayDrain: nothing consumes in this process
	// flavours, when set, runs the bench once per flavour in a child
	// process and prints the figures side by side (flavours.go).
	flavours []string
}

var allPhases = []string{"broker", "drain", "latency", "scale", "memory", "payload", "missing", "reconcile", "lanes", "replay", "console", "marks", "kill", "tenants"}

func parseFlags(args []string) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	lists := o.define(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if err := o.setLists(lists); err != nil {
		return nil, err
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	return o, nil
}

// listFlags are the comma-separated flags, which setLists parses into
// options once the flags are parsed.
type listFlags struct {
	extra, relayEnv, sizes, polls, only, flavours *string
}

// define declares the flags on fs: plain ones straight into o, lists into
// the listFlags it returns.
func (o *options) define(fs *flag.FlagSet) listFlags {
	var lists listFlags
	fs.StringVar(&o.primaryDSN, "primary-dsn", testenv.PrimaryDSN, "primary (go-sql-driver DSN): the producer writes here, the relay marks rows SENT here, the poller polls here")
	fs.StringVar(&o.replicaDSN, "replica-dsn", testenv.ReplicaDSN, "replica whose binlog the relay reads")
	lists.extra = fs.String("extra-replica-dsns", testenv.Replica2DSN, "every other replica of the primary, comma-separated (the stack's second replica, there for failover tests): their replication is paused during the measurements, caught up between steps and resumed at the end, so only the replica the relay reads shares the cores; the primary's binary logs are purged at the end only up to what these and -replica-dsn have applied, so leave none out (an unreachable one keeps the primary's logs)")
	fs.StringVar(&o.amqpURL, "amqp-url", testenv.AMQPURL, "RabbitMQ")
	fs.StringVar(&o.redisAddr, "redis-addr", testenv.RedisAddr, "Redis (the relay's checkpoints)")
	fs.StringVar(&o.relayBin, "relay-bin", "", "binlog-relay binary (default: go build ./cmd/binlog-relay into a temp dir)")
	fs.IntVar(&o.brokerWindow, "broker-window", 0, "the relay's broker.window (0: the relay's default)")
	fs.StringVar(&o.relayYAML, "relay-yaml", "", "extra top-level YAML appended to the relay's config (e.g. 'relay: {flush_interval: 100ms}')")
	lists.relayEnv = fs.String("relay-env", "", "extra environment for the relay process, comma-separated (e.g. GOGC=200)")
	fs.StringVar(&o.tableYAML, "relay-table", defaultTable, "the relay's table entry (schema is added); for experiments such as '{preset: producer-message, columns: {status: \"\"}}' (no SENT marks)")
	fs.IntVar(&o.brokerMsgs, "broker-msgs", 100000, "messages published for the broker limit")
	fs.IntVar(&o.backlog, "backlog", 100000, "PENDING rows in the backlog drain")
	fs.IntVar(&o.rate, "rate", 1000, "rows/s committed in the fixed-rate runs")
	fs.IntVar(&o.killRate, "kill-rate", 5000, "rows/s committed while the sigkill step kills the relay")
	fs.IntVar(&o.kills, "kills", 5, "SIGKILLs in the sigkill step")
	fs.DurationVar(&o.killDuration, "kill-duration", 20*time.Second, "length of the sigkill step's producer run")
	fs.DurationVar(&o.duration, "duration", 60*time.Second, "length of the main fixed-rate runs")
	fs.DurationVar(&o.idle, "idle", 30*time.Second, "idle time after each main fixed-rate run, for statements per minute when idle")
	lists.sizes = fs.String("scale", "10000,100000,1000000", "SENT rows already in the table, comma-separated; the first size is the table of the main runs")
	fs.DurationVar(&o.scaleDuration, "scale-duration", 15*time.Second, "length of the fixed-rate runs at the larger table sizes")
	lists.polls = fs.String("poll-intervals", "1s,100ms", "poll intervals of the polling relay in the main latency runs (empty: the relay alone)")
	fs.DurationVar(&o.scalePoll, "scale-poll-interval", 100*time.Millisecond, "poll interval of the polling relay at the larger table sizes")
	fs.IntVar(&o.pollBatch, "poll-batch", 500, "rows one poll claims")
	fs.BoolVar(&o.pollEager, "poll-eager", false, "the poller polls again at once after any non-empty claim (default: only after a full batch)")
	fs.IntVar(&o.bigTx, "big-tx", 100000, "rows in the one large transaction of the memory step")
	fs.IntVar(&o.payloadRows, "payload-rows", 1000, "rows of 1 MiB in the large-payload step (payload); fewer when the machine's available memory cannot hold the binary logs they make")
	fs.IntVar(&o.payload, "payload", 200, "approximate payload size in bytes")
	fs.IntVar(&o.reconcileRows, "reconcile-rows", 1000000, "outbox rows (and as many inbox rows) in the reconcile step")
	fs.IntVar(&o.lanesBacklog, "lanes-backlog", 40000, "PENDING rows in each drain of the lanes step (and messages in its broker runs)")
	fs.IntVar(&o.lanesKeys, "lanes-keys", 10000, "partition keys the lanes step's rows are spread over")
	fs.IntVar(&o.tenants, "tenants", 1000, "schemas in the tenants step, each with the seed table, matched by one pattern entry")
	fs.IntVar(&o.tenantsRows, "tenants-rows", 100000, "PENDING rows in each drain of the tenants step: spread over every tenant table, then all in one")
	fs.IntVar(&o.tenantsTxRows, "tenants-tx-rows", 1, "rows per transaction in the tenants step's drains, round robin over the tables (1: a batch of marks names as many tables as rows)")
	fs.IntVar(&o.tenantsNoisyTx, "tenants-noisy-tx", 200000, "rows in the noisy tenant's one transaction (tenants step)")
	fs.IntVar(&o.tenantsQuietRate, "tenants-quiet-rate", 50, "rows/s of the quiet tenant whose latency the tenants step measures")
	fs.DurationVar(&o.tenantsQuietDuration, "tenants-quiet-duration", 30*time.Second, "shortest run of the quiet tenant (beside the noisy one it runs until the noisy rows are all SENT)")
	fs.IntVar(&o.tenantsIdleIntervals, "tenants-idle-intervals", 6, "sweep intervals over which the tenants step counts idle statements")
	fs.DurationVar(&o.tenantsSweep, "tenants-sweep-interval", 5*time.Second, "the relay's sweeper.interval (its default) that the idle counts are divided by; set sweeper.interval with -relay-yaml to the same value to change it")
	lists.flavours = fs.String("flavours", "", "run the bench once per flavour of the stack (comma-separated: mariadb, mysql or a stack flavour such as mariadb-11.8), one after the other, each with the flavour's addresses from scripts/stack.sh env, and print each step's figures in one table with a column per flavour")
	lists.only = fs.String("only", strings.Join(allPhases, ","), "steps to run, comma-separated: "+strings.Join(allPhases, ","))
	fs.StringVar(&o.latencyTrace, "latency-trace", "", "append every fixed-rate message to this CSV file: contender, commit time (ms from the run's first commit), commit-to-delivery (ms)")
	fs.BoolVar(&o.keep, "keep", false, "keep the database, exchange and queue (for inspection)")
	return lists
}

// commaList is s split at commas, each item trimmed, empty items left out.
func commaList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// setLists parses the comma-separated flags into o.
func (o *options) setLists(lists listFlags) error {
	o.relayEnv = append(o.relayEnv, commaList(*lists.relayEnv)...)
	o.flavours = commaList(*lists.flavours)
	o.extraReplicas = append(o.extraReplicas, commaList(*lists.extra)...)
	for _, s := range strings.Split(*lists.sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 0 {
			return fmt.Errorf("-scale: %q is not a row count", s)
		}
		o.scaleSizes = append(o.scaleSizes, n)
	}
	slices.Sort(o.scaleSizes)
	for _, s := range strings.Split(*lists.polls, ",") {
		if strings.TrimSpace(s) == "" {
			continue
		}
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil || d <= 0 {
			return fmt.Errorf("-poll-intervals: %q is not a duration", s)
		}
		o.pollIntervals = append(o.pollIntervals, d)
	}
	o.phases = map[string]bool{}
	for _, p := range strings.Split(*lists.only, ",") {
		p = strings.TrimSpace(p)
		if !slices.Contains(allPhases, p) {
			return fmt.Errorf("-only: unknown step %q (have %s)", p, strings.Join(allPhases, ","))
		}
		o.phases[p] = true
	}
	return nil
}

// validate checks the figures the flags set.
func (o *options) validate() error {
	switch {
	case len(o.scaleSizes) == 0:
		return fmt.Errorf("-scale: at least one size")
	case o.rate < 1 || o.backlog < 1 || o.pollBatch < 1 || o.brokerMsgs < 1 || o.bigTx < 1 || o.payloadRows < 1 || o.reconcileRows < 1 ||
		o.lanesBacklog < 1 || o.lanesKeys < 1 || o.killRate < 1 || o.kills < 1 || o.killDuration <= 0:
		return fmt.Errorf("-rate, -backlog, -poll-batch, -broker-msgs, -big-tx, -payload-rows, -reconcile-rows, -lanes-backlog, -lanes-keys, -kill-rate, -kills and -kill-duration must be positive")
	case o.tenants < 3 || o.tenants > 9999 || o.tenantsRows < 1 || o.tenantsNoisyTx < 1 || o.tenantsQuietRate < 1 || o.tenantsQuietDuration <= 0 ||
		o.tenantsIdleIntervals < 1 || o.tenantsSweep <= 0:
		return fmt.Errorf("-tenants: 3 to 9999; -tenants-rows, -tenants-noisy-tx, -tenants-quiet-rate, -tenants-quiet-duration, -tenants-idle-intervals and -tenants-sweep-interval must be positive")
	case o.payload < 16:
		return fmt.Errorf("-payload: at least 16 bytes")
	}
	return nil
}

func main() {
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(o.flavours) > 0 {
		if err := runFlavours(ctx, o.flavours, withoutFlag(os.Args[1:], "flavours"), os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	start := time.Now()
	rep := &report{}
	err = run(ctx, o, rep)
	rep.add("bench_wall_seconds", time.Since(start).Seconds(), "s")
	rep.print(os.Stdout, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// withoutFlag is args with -name (and --name, as -name v or -name=v) left
// out.
func withoutFlag(args []string, name string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		a := strings.TrimLeft(args[i], "-")
		if a == name {
			i++ // its value
			continue
		}
		if strings.HasPrefix(a, name+"=") && strings.HasPrefix(args[i], "-") {
			continue
		}
		out = append(out, args[i])
	}
	return out
}

// progress logs to stderr, so stdout carries only the figures and the table.
func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s  "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

// run executes the steps in order. The main runs use the smallest table
// size; the scale step repeats drain and latency at the others.
func run(ctx context.Context, o *options, rep *report) error {
	e, err := newEnv(ctx, o)
	if err != nil {
		return err
	}
	defer e.close()
	rep.stack = e.stack
	progress("flavour %s: primary %s, replica %s; broker %s", e.stack.flavor, e.stack.primary, e.stack.replica, e.stack.broker)
	progress("database %s, exchange %s, queue %s (quorum queue %s)", e.dbName, e.topo.exchange, e.topo.queue, e.topo.quorumQueue())
	if err := runComparisonSteps(ctx, e, rep); err != nil {
		return err
	}
	for _, s := range relaySteps {
		if !o.phases[s.phase] {
			continue
		}
		if err := s.run(ctx, e, rep); err != nil {
			return fmt.Errorf("%s: %w", s.what, err)
		}
	}
	return nil
}

// runComparisonSteps runs the steps that compare binlog-relay with the
// poller: the broker's limit (the ceiling of both), the drains and the
// fixed-rate runs at the main table size, then the scale step at the
// larger ones.
func runComparisonSteps(ctx context.Context, e *env, rep *report) error {
	o := e.o
	if o.phases["broker"] {
		if err := brokerLimit(ctx, e, rep); err != nil {
			return fmt.Errorf("broker limit: %w", err)
		}
	}
	base := o.scaleSizes[0]
	if o.phases["drain"] || o.phases["latency"] || o.phases["scale"] {
		if err := e.growTo(ctx, base); err != nil {
			return err
		}
	}
	if o.phases["drain"] {
		if err := drainStep(ctx, e, rep, base); err != nil {
			return fmt.Errorf("drain: %w", err)
		}
	}
	if o.phases["latency"] {
		if err := latencyStep(ctx, e, rep, base); err != nil {
			return fmt.Errorf("latency: %w", err)
		}
	}
	if o.phases["scale"] {
		for _, size := range o.scaleSizes[1:] {
			if err := e.growTo(ctx, size); err != nil {
				return err
			}
			if err := scaleStep(ctx, e, rep, size); err != nil {
				return fmt.Errorf("scale %d: %w", size, err)
			}
		}
	}
	return nil
}

// relaySteps are the steps that measure binlog-relay alone, in the order
// they run: each with its -only name and the name its errors carry.
var relaySteps = []struct {
	phase, what string
	run         func(ctx context.Context, e *env, rep *report) error
}{
	{"memory", "memory", bigTxStep},
	{"payload", "payload", payloadBetweenPurges},
	{"missing", "missing exchange", missingExchangeStep},
	{"reconcile", "reconcile", reconcileStep},
	{"lanes", "lanes", lanesStep},
	{"replay", "replay", replayStep},
	{"console", "console queries", consoleStep},
	{"marks", "marks", marksStep},
	{"kill", "sigkill", killStep},
	{"tenants", "tenants", tenantsStep},
}

// payloadBetweenPurges is the payload step between two purges of the
// binary logs. The large-payload step writes about 3 GB of row images to
// each server, and the stack keeps its data in memory: clear what the
// earlier steps left first, and what this one left after it.
func payloadBetweenPurges(ctx context.Context, e *env, rep *report) error {
	e.purgeBinlogs()
	if err := payloadStep(ctx, e, rep); err != nil {
		return err
	}
	e.purgeBinlogs()
	return nil
}
