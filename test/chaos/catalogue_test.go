package chaos

import "time"

// Fault is one kind of failure the harness injects, as etcd's robustness
// tests have failpoints: a name, where it applies, how long it lasts, how
// it is injected and recovered, and how many duplicates the docs allow it
// (docs/ha.md, "What each fault costs"). Inject may leave what Recover
// needs in st.
type Fault interface {
	Name() string
	Available(s *Schedule) bool
	Hold(s *Schedule) (lo, hi time.Duration)
	Bound(s *Schedule, p Planned) int
	Inject(e *env, p Planned, st *state) (string, error)
	Recover(e *env, p Planned, st *state) (string, error)
}

// state carries what an injection did to its recovery.
type state struct {
	relay   int          // the relay paused, or stopped
	replica int          // the replica stopped or cut
	alarm   *memoryAlarm // the broker's memory alarm raised (brokerAlarmStop)
	stopped bool         // the relay exited, to be started again
}

// catalogue is every fault, in the order the summary lists them.
var catalogue = []Fault{
	relayKill{}, leaderTakeover{}, relayPause{},
	brokerReset{}, brokerBlackhole{}, streamBlackhole{}, rabbitNodeStop{}, brokerAlarmStop{},
	redisRestart{}, redisCut{}, sentinelFailover{}, clusterFailover{},
	replicaStop{}, replicaFailover{}, primaryCut{},
	cutOver{steps: 1}, cutOver{steps: 2}, rotation{}, requeue{}, configChange{},
}

func byName(name string) Fault {
	for _, f := range catalogue {
		if f.Name() == name {
			return f
		}
	}
	panic("chaos: no fault " + name)
}

// lanesBound is the most lanes the schedule's relays run with (a config
// change moves between the configuration's lanes and 2).
func lanesBound(s *Schedule) int {
	n := s.Config.Lanes()
	for _, p := range s.Faults {
		if p.Kind == "config-change" {
			n = max(n, 2)
		}
	}
	return n
}

// windowBound is what a lost broker connection costs: every lane's
// unconfirmed messages published again (docs/ha.md). The stream
// deduplicates them.
func windowBound(s *Schedule) int {
	if s.Config.Stream {
		return 0
	}
	return lanesBound(s) * brokerWindow
}

// crashBound is what a relay that stops without draining costs: the rows in
// flight, published and not yet marked: every lane's window plus the
// confirmed rows waiting for their SENT update (relay.max_unmarked) (docs/ha.md, "Exactly what a
// crash costs"). The stream deduplicates them by publishing id.
func crashBound(s *Schedule) int {
	if s.Config.Stream {
		return 0
	}
	return lanesBound(s)*brokerWindow + maxUnmarked
}

// haBound is a fault that costs the leader its lease: a takeover, as a
// crash; without a lease the relay holds and goes on, nothing twice.
func haBound(s *Schedule) int {
	if s.Relays > 1 {
		return crashBound(s)
	}
	return 0
}

func span(s *Schedule, short, long [2]time.Duration) (time.Duration, time.Duration) {
	if s.Profile.Long {
		return long[0], long[1]
	}
	return short[0], short[1]
}
