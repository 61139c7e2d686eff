package binlog_test

import (
	"context"
	"crypto/tls"
	"database/sql"
	"fmt"
	"log/slog"
	"os"

	_ "github.com/go-sql-driver/mysql"

	"github.com/binlog-relay/binlog-relay/pkg/binlog"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// Stream the inserts into one outbox table from a replica, from its current
// position, and track the position after each whole transaction
// (examples/embed is the whole program, with routing and a checkpoint).
func ExampleNew() {
	ctx := context.Background()
	db, err := sql.Open("mysql", "relay:secret@tcp(127.0.0.1:3308)/")
	if err != nil {
		panic(err)
	}
	table, _ := outbox.Preset("debezium")
	table.Schema = "shop"
	if err := table.Validate("shop.outbox"); err != nil {
		panic(err)
	}
	flavor, err := binlog.DetectFlavor(ctx, db)
	if err != nil {
		panic(err)
	}
	start, err := binlog.CurrentPosition(ctx, db, flavor)
	if err != nil {
		panic(err)
	}
	r, err := binlog.New(binlog.Config{Host: "127.0.0.1", Port: 3308, User: "relay", Password: "secret", Flavor: flavor},
		[]*outbox.Table{&table},
		binlog.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, nil))),
		binlog.WithSchemaSource(&binlog.InfoSchema{DB: db}))
	if err != nil {
		panic(err)
	}
	tracker, _ := binlog.NewTracker(start)
	events := make(chan binlog.Event, 256)
	go func() {
		for ev := range events {
			switch ev.Kind {
			case binlog.KindRow:
				fmt.Println("inserted", ev.Row.ID)
			case binlog.KindCommit:
				_ = tracker.Apply(ev.Commit)
				fmt.Println("transaction ends at", tracker.Position())
			}
		}
	}()
	// Run blocks until ctx ends (at a transaction boundary) or an error it
	// cannot retry: ErrPositionPurged, ErrServerIDConflict, ErrXABufferFull.
	if err := r.Run(ctx, start, events); err != nil {
		fmt.Println(err)
	}
}

// A tracker turns the commits a reader emits into the position to resume
// from, in the flavour's own GTID form.
func ExampleTracker() {
	start, _ := binlog.NormalizeGTIDSet(binlog.FlavorMySQL, "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5")
	tr, err := binlog.NewTracker(binlog.Position{Flavor: binlog.FlavorMySQL, GTIDSet: start})
	if err != nil {
		panic(err)
	}
	fmt.Println(tr.Position().GTIDSet)
	// Output: 3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5
}

// ContainsGTID tells whether a replica has caught up with a position.
func ExampleContainsGTID() {
	ok, _ := binlog.ContainsGTID(binlog.FlavorMariaDB, "0-1-50,1-2-7", "0-1-42")
	behind, _ := binlog.ContainsGTID(binlog.FlavorMySQL, "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-40", "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-42")
	fmt.Println(ok, behind)
	// Output: true false
}

// NormalizeGTIDSet gives a GTID text in the flavour's canonical form: one
// GTID per domain on MariaDB, merged intervals on MySQL.
func ExampleNormalizeGTIDSet() {
	m, _ := binlog.NormalizeGTIDSet(binlog.FlavorMariaDB, "0-1-90872,0-2-90873,1-1-5")
	y, _ := binlog.NormalizeGTIDSet(binlog.FlavorMySQL, "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5:6-9")
	fmt.Println(m)
	fmt.Println(y)
	// Output:
	// 0-2-90873,1-1-5
	// 3e11fa47-71ca-11e1-9e33-c80aa9429562:1-9
}

// A PasswordFunc signs in with a credential that expires, such as an RDS
// IAM token: the reader asks for one before each connection, for the
// server it dials, and never logs it. RDS takes IAM tokens only over TLS.
func ExamplePasswordFunc() {
	var tokenFor binlog.PasswordFunc = func(ctx context.Context, addr string) (string, error) {
		// e.g. auth.BuildAuthToken(ctx, addr, "eu-west-1", "relay", awsCfg.Credentials)
		return "token-for-" + addr, nil
	}
	r, err := binlog.New(binlog.Config{Host: "db-1.abc.eu-west-1.rds.amazonaws.com", Port: 3306, User: "relay",
		PasswordFunc: tokenFor, TLS: &tls.Config{ServerName: "db-1.abc.eu-west-1.rds.amazonaws.com"},
		Flavor: binlog.FlavorMySQL}, nil)
	fmt.Println(r != nil, err)
	// Output: true <nil>
}
