package app

// The operator's console (internal/console) over this App: the overview
// read off the App's own state, the failures read from the source replica,
// and the requeue and replay actions run as internal/command runs them.

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/command"
	"github.com/binlog-relay/binlog-relay/internal/console"
	"github.com/binlog-relay/binlog-relay/internal/lease"
	"github.com/binlog-relay/binlog-relay/internal/replay"
	"github.com/binlog-relay/binlog-relay/internal/sweeper"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// consoleState is what the console reads that only the App has: the last
// warnings and errors logged, and the sweeper running now.
type consoleState struct {
	errs    *console.Recorder               // nil without http.console
	sweeper atomic.Pointer[sweeper.Sweeper] // the sweeper `run` runs now
	server  *console.Server                 // built by httpService
}

// Console returns the console served at /ui (nil when http.console is off
// or the HTTP server is not started), for tests.
func (a *App) Console() *console.Server { return a.console.server }

// newConsole builds the console when http.console is on.
func (a *App) newConsole() (*console.Server, error) {
	if !a.Cfg.HTTP.Console {
		return nil, nil
	}
	s, err := console.New(console.Config{Name: a.Cfg.Name, Token: a.Cfg.HTTP.ConsoleToken, Payloads: a.Cfg.HTTP.ConsolePayloads},
		console.Deps{Tables: a.consoleTables, Replica: a.Source.DB, Overview: a.overview, Router: a.wire.router,
			Actions: appActions{a}, Log: a.Log.Named("console")})
	if err != nil {
		return nil, err
	}
	a.console.server = s
	return s, nil
}

// consoleTables are the tables the console shows: the configured ones.
// The one place the console enumerates tables, so table patterns (several
// tables per entry) can extend it.
func (a *App) consoleTables() []*outbox.Table { return a.Cfg.Tables }

// appActions runs the console's actions as the commands do.
type appActions struct{ a *App }

func (x appActions) Requeue(ctx context.Context, o command.RequeueOptions) (command.RequeueResult, error) {
	return command.RunRequeue(ctx, x.a.Env(), o)
}

func (x appActions) Replay(ctx context.Context, o command.ReplayOptions, w io.Writer) (*replay.Summary, error) {
	return command.Replay(ctx, x.a.Env(), o, w, io.Discard)
}

// rosterService keeps this relay in the roster of its name's relays (the
// console's leader and standbys) with ha.enabled and the console on.
func (a *App) rosterService() service {
	if !a.Cfg.HA.Enabled || !a.Cfg.HTTP.Console {
		return nil
	}
	return func(ctx context.Context) error {
		lease.RunRoster(ctx, a.Redis, a.Cfg.RedisKeys(), func() string {
			if l := a.lease.Load(); l != nil {
				return l.Holder()
			}
			return ""
		})
		return nil
	}
}

// overview is the console's overview: the App's state, the checkpoint
// (from Redis on a standby) and the roster; no database is queried.
func (a *App) overview(ctx context.Context) console.Overview {
	now := time.Now()
	o := console.Overview{Name: a.Cfg.Name, Version: a.Build.Resolved().Version, Now: now, HA: a.Cfg.HA.Enabled}
	o.Ready, o.Why = a.Ready()
	switch {
	case a.leader.Is():
		o.Role = "leader"
	case a.Cfg.HA.Enabled:
		o.Role = "standby"
	default:
		o.Role = "starting"
	}
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if l := a.lease.Load(); l != nil {
		o.Leader, o.Self = l.Leader(), l.Holder()
		if o.Role == "leader" {
			o.Leader = l.Holder()
		}
		seen, _ := lease.Roster(rctx, a.Redis, a.Cfg.RedisKeys(), now)
		for _, s := range seen {
			role := "standby"
			if s.Holder == o.Leader {
				role = "leader"
			}
			o.Relays = append(o.Relays, console.Relay{Holder: s.Holder, Role: role, Seen: now.Sub(s.At)})
		}
	}
	o.Source = console.Source{Addr: a.Source.Addr()}
	if st, ok := a.replica.State(); ok {
		o.Source.IsReplica, o.Source.Threads = st.IsReplica, st.Threads()
		if st.SecondsBehind != nil {
			o.Source.Behind = strconv.FormatInt(*st.SecondsBehind, 10)
		}
	}
	o.Source.Delay, o.Source.DelayKnown = a.replica.Delay(now)
	if r := a.ops.reader.Load(); r != nil {
		o.Source.Connected, o.Lag = r.Connected(), r.Lag(now)
		if c, ok := r.LastCommit(); ok {
			o.Streamed = console.Position{Have: true, Text: commitText(c.GTID.String(), c.File, c.Pos)}
		}
	}
	if rl := a.Relay(); rl != nil && a.leader.Is() {
		if cp, ok := rl.LastCheckpoint(); ok {
			o.Checkpoint = console.Position{Have: true, Text: cp.Position().String(), Age: now.Sub(cp.SavedAt)}
		}
	} else if cp, err := a.Store.Load(rctx); err == nil {
		o.Checkpoint = console.Position{Have: true, Text: cp.Position().String(), Age: now.Sub(cp.SavedAt)}
	}
	o.Primary = console.Primary{Addr: a.Cfg.Primary.Addr()}
	if pos, at, ok := a.replica.LastPrimary(); ok {
		o.Primary.Position, o.Primary.Age = pos, now.Sub(at)
	} else {
		o.Primary.Note = "not read: the relay reads the primary's position only while the replica is behind (it does not poll the primary)"
	}
	if p := a.ops.pub.Load(); p != nil {
		o.BrokerConnected, o.BrokerNodes = p.Connected(), p.ConnectedNodes()
	}
	o.Sweeper = console.Sweeper{Enabled: a.Cfg.SweeperEnabled()}
	if s := a.console.sweeper.Load(); s != nil {
		o.Sweeper.Running, o.Sweeper.Interval = true, s.Interval()
		if r, ok := s.LastRound(); ok {
			o.Sweeper.LastRound, o.Sweeper.LastDue, o.Sweeper.LastErr = now.Sub(r.At), r.Due, r.Err
		}
		o.Sweeper.Precheck = "source replica"
		if replicaDegraded(&a.replica, a.stages.sweeper.GracePeriod) {
			o.Sweeper.Precheck = "primary (the replica is stopped or further behind than sweeper.grace_period)"
		}
	}
	o.Recent = a.Metrics().Recent().Points()
	if a.console.errs != nil {
		o.Errors = a.console.errs.Lines()
	}
	return o
}

// commitText is a transaction's position for people: its GTID and, when
// known, its file and offset.
func commitText(gtid, file string, pos uint32) string {
	switch {
	case file == "":
		return gtid
	case gtid == "":
		return fmt.Sprintf("%s:%d", file, pos)
	}
	return fmt.Sprintf("%s (%s:%d)", gtid, file, pos)
}
