// Package rediswait runs a write script and then WAIT on the same
// connection, so a caller knows how many replicas have its write before it
// relies on it (redis.wait_replicas, docs/ha.md).
//
// Redis replicates asynchronously: a write the master acknowledged can be
// lost when a replica that never got it is promoted (a Sentinel or Cluster
// failover). WAIT numreplicas timeout blocks until that many replicas have
// acknowledged every write sent earlier *on this connection* (the client's
// own replication offset), or until the timeout, and returns how many did.
// So WAIT only means something on the connection the write went over: with
// a connection pool it must share a pipeline with the write. WAIT narrows
// the window, it does not make Redis consistent: a failover can still
// promote a replica that did not acknowledge
// (https://redis.io/docs/latest/commands/wait/).
package rediswait

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// Eval runs script with keys and args on the master that owns keys[0], then
// WAIT replicas timeout on the same connection. It returns the script's
// reply (read it with Slice, Int64...), the number of replicas that
// acknowledged, and WAIT's own error (the write may have happened even
// then; count it as not acknowledged).
func Eval(ctx context.Context, c redis.UniversalClient, script *redis.Script, keys []string, args []any,
	replicas int, timeout time.Duration) (res *redis.Cmd, acked int64, waitErr error) {
	var on redis.Pipeliner
	cc, cluster := c.(*redis.ClusterClient)
	if cluster {
		// A cluster pipeline sends each command to the node of its first
		// key; WAIT has none. The slot's master, asked for directly, takes
		// both on one connection.
		node, err := cc.MasterForKey(ctx, keys[0])
		if err != nil {
			res = redis.NewCmd(ctx)
			res.SetErr(err)
			return res, 0, err
		}
		on = node.Pipeline()
	} else {
		on = c.Pipeline()
	}
	res = script.Eval(ctx, on, keys, args...) // EVAL, not EVALSHA: no NOSCRIPT retry inside a pipeline
	wait := redis.NewIntCmd(ctx, "wait", replicas, timeout.Milliseconds())
	_ = on.Process(ctx, wait) // queued
	if _, err := on.Exec(ctx); err != nil && res.Err() == nil && res.Val() == nil {
		// Never sent (no connection): go-redis then leaves the commands
		// without an error of their own.
		res.SetErr(err)
		wait.SetErr(err)
	}
	if cluster && res.Err() != nil && !errors.Is(res.Err(), redis.Nil) {
		// MOVED after a failover, or the node gone: the node was asked
		// directly, so the client did not see it; reload the slot map.
		cc.ReloadState(ctx)
	}
	acked, waitErr = wait.Result()
	return res, acked, waitErr
}
