package chaos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
)

// The database: replicas, the primary, renames, re-queues, and the
// relays' settings.

var switches = []string{"switch2", "switch3"}

// sourceOf is the replica the leader reads (0 when it cannot tell).
func sourceOf(e *env) int {
	l := e.leader()
	if l < 0 {
		return 0
	}
	if k := e.readingFrom(l); k >= 0 {
		return k
	}
	return 0
}

// replicaStop stops replication on the leader's source: it lags, then
// catches up.
type replicaStop struct{}

func (replicaStop) Name() string             { return "replica-stop" }
func (replicaStop) Available(*Schedule) bool { return true }
func (replicaStop) Hold(s *Schedule) (time.Duration, time.Duration) {
	return span(s, [2]time.Duration{time.Second, 6 * time.Second}, [2]time.Duration{time.Second, 20 * time.Second})
}
func (replicaStop) Bound(*Schedule, Planned) int { return 0 }
func (replicaStop) Inject(e *env, _ Planned, st *state) (string, error) {
	st.replica = sourceOf(e)
	if _, err := e.tp.Servers[switches[st.replica]].Exec(testenv.StopReplicaSQL); err != nil {
		return "", err
	}
	return "STOP REPLICA on " + switches[st.replica] + ", the leader's source", nil
}
func (replicaStop) Recover(e *env, _ Planned, st *state) (string, error) {
	_, err := e.tp.Servers[switches[st.replica]].Exec(testenv.StartReplicaSQL)
	return "START REPLICA", err
}

// replicaFailover cuts the leader's source off: it moves to the other
// replica by GTID.
type replicaFailover struct{}

func (replicaFailover) Name() string             { return "replica-failover" }
func (replicaFailover) Available(*Schedule) bool { return true }
func (replicaFailover) Hold(s *Schedule) (time.Duration, time.Duration) {
	return span(s, [2]time.Duration{2 * time.Second, 5 * time.Second}, [2]time.Duration{2 * time.Second, 15 * time.Second})
}
func (replicaFailover) Bound(*Schedule, Planned) int { return 0 }
func (replicaFailover) Inject(e *env, _ Planned, st *state) (string, error) {
	st.replica = sourceOf(e)
	e.replicas[st.replica].Cut()
	return switches[st.replica] + " cut off (the leader's source)", nil
}
func (replicaFailover) Recover(e *env, _ Planned, st *state) (string, error) {
	to := "no replica"
	if l := e.leader(); l >= 0 {
		if k := e.readingFrom(l); k >= 0 {
			to = switches[k]
		}
	}
	e.replicas[st.replica].Restore()
	return "the leader reads " + to, nil
}

type primaryCut struct{}

func (primaryCut) Name() string             { return "primary-cut" }
func (primaryCut) Available(*Schedule) bool { return true }
func (primaryCut) Hold(s *Schedule) (time.Duration, time.Duration) {
	return span(s, [2]time.Duration{time.Second, 5 * time.Second}, [2]time.Duration{time.Second, 20 * time.Second})
}
func (primaryCut) Bound(*Schedule, Planned) int { return 0 }
func (primaryCut) Inject(e *env, _ Planned, _ *state) (string, error) {
	e.primary.Cut()
	return "the relays' connections to the primary cut", nil
}
func (primaryCut) Recover(e *env, _ Planned, _ *state) (string, error) {
	e.primary.Restore()
	return "", nil
}

// cutOver is an online schema change's cut-over as gh-ost runs it: a ghost
// table created like the outbox table and filled in chunks while the
// application writes, then, with its writes held, the last rows and the
// statuses the relay marked copied over, and the swap: one RENAME of both
// tables (steps 1, gh-ost's default), or two (steps 2: gh-ost's
// --cut-over=two-step, Facebook's OSC). The old table is kept (_t_del),
// dropped by the next cut-over.
type cutOver struct{ steps int }

func (c cutOver) Name() string                                { return fmt.Sprintf("cutover-%dstep", c.steps) }
func (cutOver) Available(*Schedule) bool                      { return true }
func (cutOver) Hold(*Schedule) (time.Duration, time.Duration) { return 0, 0 }
func (cutOver) Bound(*Schedule, Planned) int                  { return 0 }
func (c cutOver) Inject(e *env, _ Planned, _ *state) (string, error) {
	t := e.table
	gho, del := "_"+t+"_gho", "_"+t+"_del"
	db := e.db
	status := e.s.Config.Status()
	if err := execAll(db, "DROP TABLE IF EXISTS `"+del+"`", "DROP TABLE IF EXISTS `"+gho+"`",
		fmt.Sprintf("CREATE TABLE `%s` LIKE `%s`", gho, t)); err != nil {
		return "", err
	}
	// The row copy, beside the writer.
	var top int64
	if status {
		if err := db.QueryRow(fmt.Sprintf("SELECT COALESCE(MAX(id), 0) FROM `%s`", t)).Scan(&top); err != nil {
			return "", err
		}
		for lo := int64(0); lo < top; lo += 1000 {
			if err := execAll(db, fmt.Sprintf("INSERT IGNORE INTO `%s` SELECT * FROM `%s` WHERE id > %d AND id <= %d LOCK IN SHARE MODE", gho, t, lo, min(lo+1000, top))); err != nil {
				return "", err
			}
		}
	} else if err := execAll(db, fmt.Sprintf("INSERT IGNORE INTO `%s` SELECT * FROM `%s` LOCK IN SHARE MODE", gho, t)); err != nil {
		return "", err
	}
	e.writer.hold.Lock()
	defer e.writer.hold.Unlock()
	var sync []string
	if status {
		sync = []string{
			fmt.Sprintf("INSERT IGNORE INTO `%s` SELECT * FROM `%s` WHERE id > %d", gho, t, top),
			// What gh-ost's binlog applier would have applied meanwhile:
			// the relay's marks, the re-queues.
			fmt.Sprintf("UPDATE `%s` g JOIN `%s` s ON g.id = s.id SET g.status = s.status, g.content = s.content, g.retry_count = s.retry_count, "+
				"g.next_retry_time = s.next_retry_time, g.error_msg = s.error_msg, g.update_time = s.update_time, g.version = s.version "+
				"WHERE g.version <> s.version OR g.status <> s.status OR g.content <> s.content", gho, t),
		}
	} else {
		sync = []string{fmt.Sprintf("INSERT IGNORE INTO `%s` SELECT * FROM `%s`", gho, t)}
	}
	if err := execAll(db, sync...); err != nil {
		return "", err
	}
	rename := []string{fmt.Sprintf("RENAME TABLE `%s` TO `%s`, `%s` TO `%s`", t, del, gho, t)}
	if c.steps == 2 {
		rename = []string{fmt.Sprintf("RENAME TABLE `%s` TO `%s`", t, del), fmt.Sprintf("RENAME TABLE `%s` TO `%s`", gho, t)}
	}
	if err := execAll(db, rename...); err != nil {
		return "", err
	}
	e.mu.Lock()
	e.cutovers++
	e.mu.Unlock()
	return strings.Join(rename, "; "), nil
}
func (cutOver) Recover(*env, Planned, *state) (string, error) { return "", nil }

// rotation archives the outbox table: a new one created like it, then
// RENAME TABLE t TO t_arch_N, t_new TO t (its ids start at 1 again).
type rotation struct{}

func (rotation) Name() string                                  { return "rename-rotation" }
func (rotation) Available(*Schedule) bool                      { return true }
func (rotation) Hold(*Schedule) (time.Duration, time.Duration) { return 0, 0 }
func (rotation) Bound(*Schedule, Planned) int                  { return 0 }
func (rotation) Inject(e *env, _ Planned, _ *state) (string, error) {
	e.writer.hold.Lock()
	defer e.writer.hold.Unlock()
	e.mu.Lock()
	t := e.table
	arch := fmt.Sprintf("%s_arch_%d", t, len(e.archives)+1)
	e.mu.Unlock()
	q := fmt.Sprintf("RENAME TABLE `%s` TO `%s`, `%s_new` TO `%s`", t, arch, t, t)
	if err := execAll(e.db, fmt.Sprintf("CREATE TABLE `%s_new` LIKE `%s`", t, t), q); err != nil {
		return "", err
	}
	e.mu.Lock()
	e.archives = append(e.archives, arch)
	e.mu.Unlock()
	return q, nil
}
func (rotation) Recover(*env, Planned, *state) (string, error) { return "", nil }

// requeue is the application putting SENT rows back to PENDING.
type requeue struct{}

func (requeue) Name() string                                  { return "requeue" }
func (requeue) Available(s *Schedule) bool                    { return s.Config.Status() }
func (requeue) Hold(*Schedule) (time.Duration, time.Duration) { return 0, 0 }
func (requeue) Bound(*Schedule, Planned) int                  { return 0 }
func (requeue) Inject(e *env, p Planned, _ *state) (string, error) {
	later := p.Arg/64%4 == 0 // a quarter: for later
	n, err := e.writer.requeue(5+p.Arg%46, later)
	if err != nil {
		return "", err
	}
	if later {
		return fmt.Sprintf("%d SENT rows put back to PENDING for two hours on", n), nil
	}
	return fmt.Sprintf("%d SENT rows put back to PENDING with a new body", n), nil
}
func (requeue) Recover(*env, Planned, *state) (string, error) { return "", nil }

// configChange stops every relay (SIGKILL or SIGTERM, by the draw),
// changes one setting and starts them again: relay.lanes, the status
// table's statuses.publishable, or route.time_zone.
type configChange struct{}

func (configChange) Name() string                                  { return "config-change" }
func (configChange) Available(*Schedule) bool                      { return true }
func (configChange) Hold(*Schedule) (time.Duration, time.Duration) { return 0, 0 }

// variant is the setting changed and whether the relays are killed.
func (configChange) variant(s *Schedule, p Planned) (setting string, kill bool) {
	settings := []string{"lanes", "time_zone"}
	if s.Config.Status() {
		settings = append(settings, "publishable")
	}
	return settings[p.Arg%len(settings)], p.Arg/8%2 == 0
}

func (c configChange) Bound(s *Schedule, p Planned) int {
	_, kill := c.variant(s, p)
	switch {
	case !kill:
		return 0 // a drained stop: nothing twice
	case s.Config.Stream:
		// Another seq_scope (each of these settings is in it: issue 37,
		// item 2): the ids start above what the broker stored, and the
		// rows replayed after the kill are stored again (docs/lifecycle.md).
		return lanesBound(s)*brokerWindow + maxUnmarked
	}
	return crashBound(s)
}

func (c configChange) Inject(e *env, p Planned, _ *state) (string, error) {
	setting, kill := c.variant(e.s, p)
	sig, how := syscall.SIGTERM, "SIGTERM"
	if kill {
		sig, how = syscall.SIGKILL, "SIGKILL"
	}
	// The standbys first, so none takes over with the old settings.
	l := e.leader()
	order := []int{}
	for i := range e.relays {
		if i != l {
			order = append(order, i)
		}
	}
	if l >= 0 {
		order = append(order, l)
	}
	for _, i := range order {
		r := e.relays[i]
		_ = r.proc.Cmd.Process.Signal(sig)
		if _, err := r.proc.Wait(45 * time.Second); err != nil {
			return "", fmt.Errorf("relay %d after %s: %w", i, how, err)
		}
	}
	e.mu.Lock()
	var change string
	switch setting {
	case "lanes":
		from := e.settings.Lanes
		if from == 2 {
			e.settings.Lanes = e.s.Config.Lanes()
		} else {
			e.settings.Lanes = 2
		}
		change = fmt.Sprintf("relay.lanes %d -> %d", from, e.settings.Lanes)
	case "time_zone":
		from := cmpOr(e.settings.TimeZone, "UTC")
		if e.settings.TimeZone == "" {
			e.settings.TimeZone = "Asia/Shanghai"
		} else {
			e.settings.TimeZone = ""
		}
		change = fmt.Sprintf("route.time_zone %s -> %s", from, cmpOr(e.settings.TimeZone, "UTC"))
	case "publishable":
		from := cmpOr(e.settings.Publishable, "the preset's PENDING, SENDING")
		if e.settings.Publishable == "" {
			e.settings.Publishable = "PENDING"
		} else {
			e.settings.Publishable = ""
		}
		change = fmt.Sprintf("statuses.publishable %s -> %s", from, cmpOr(e.settings.Publishable, "the preset's PENDING, SENDING"))
	}
	e.mu.Unlock()
	e.writeConfigs()
	for _, i := range order {
		e.startRelay(i)
	}
	return fmt.Sprintf("%s of every relay, %s, started again", how, change), nil
}
func (configChange) Recover(*env, Planned, *state) (string, error) { return "", nil }

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// execAll runs statements on db one after another, each again after a
// deadlock (an online schema change tool retries its chunks so).
func execAll(db *sql.DB, qs ...string) error {
	for _, q := range qs {
		for try := 1; ; try++ {
			_, err := db.Exec(q)
			if err == nil {
				break
			}
			var me *mysql.MySQLError
			if errors.As(err, &me) && (me.Number == 1213 || me.Number == 1205) && try < 10 {
				time.Sleep(time.Duration(try) * 20 * time.Millisecond)
				continue
			}
			return fmt.Errorf("%.100s: %w", q, err)
		}
	}
	return nil
}

// killRedisAt SIGKILLs the Redis server at addr (its pid from INFO).
func killRedisAt(addr string) error {
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	info, err := rc.Info(context.Background(), "server").Result()
	if err != nil {
		return fmt.Errorf("INFO server on %s: %w", addr, err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			var pid int
			if _, err := fmt.Sscan(v, &pid); err == nil {
				return syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	return fmt.Errorf("no process_id in INFO server of %s", addr)
}
