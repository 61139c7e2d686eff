package checkpoint_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/binlog-relay/binlog-relay/pkg/binlog"
	"github.com/binlog-relay/binlog-relay/pkg/checkpoint"
)

// The stored form is one versioned JSON object.
func ExampleCheckpoint_Encode() {
	p := binlog.Position{Flavor: binlog.FlavorMariaDB, GTIDSet: "0-1-42", File: "binlog.000003", Pos: 1234}
	b, _ := checkpoint.FromPosition(p, "server_id=1", time.Date(2026, 12, 1, 13, 0, 0, 0, time.UTC)).Encode()
	fmt.Println(string(b))
	// Output: {"version":1,"flavor":"mariadb","gtid_set":"0-1-42","binlog_file":"binlog.000003","binlog_pos":1234,"server":"server_id=1","saved_at":"2026-12-01T13:00:00Z"}
}

// Decode reads what any relay saved and gives the position to resume from.
func ExampleDecode() {
	cp, err := checkpoint.Decode([]byte(`{"flavor":"mariadb","gtid_set":"0-1-90872,0-2-90873"}`))
	if err != nil {
		panic(err)
	}
	fmt.Println(cp.Version, cp.Position())
	// Output: 1 mariadb gtid=0-2-90873 file= pos=0
}

// A Redis store under one key; without a checkpoint yet, start from the
// source's current position.
func ExampleNewRedis() {
	rc := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rc.Close()
	store := checkpoint.NewRedis(rc, "binlog-relay:{orders}:checkpoint")
	cp, err := store.Load(context.Background())
	switch {
	case errors.Is(err, checkpoint.ErrNotFound):
		fmt.Println("no checkpoint yet: start from binlog.CurrentPosition")
	case err != nil:
		fmt.Println("redis:", err)
	default:
		fmt.Println("resume from", cp.Position())
	}
}
