package discover

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
)

// Describe reads each DDL file's tables on the flavour's replica into the
// proposals the file itself gives (what the unit tests check): the
// server's types, defaults (MariaDB quotes them), comments, keys and
// MariaDB's JSON-as-LONGTEXT change nothing. The values present are read
// too: the rows decide the status values a table without an ENUM has.
func TestDescribeReadsWhatTheDDLSays(t *testing.T) {
	testenv.Integration(t)
	ctx := context.Background()
	for _, f := range []string{"testdata/seed/seed-ddl.sql", "testdata/init/custom.sql", "testdata/init/unmappable.sql",
		"schema/producer_message.sql", "schema/debezium_outbox.sql", "schema/eventuate_message.sql"} {
		db := testenv.NewDB(t, f)
		for name, want := range readDDL(t, f) {
			got, err := Describe(ctx, db.Replica, db.Name, name)
			if err != nil {
				t.Fatalf("%s %s: %v", f, name, err)
			}
			want.Schema = db.Name
			pw, errW := Propose(want)
			pg, errG := Propose(got)
			if (errW == nil) != (errG == nil) || (errW != nil && errW.Error() != errG.Error()) {
				t.Errorf("%s %s: from the server %v, from the DDL %v", f, name, errG, errW)
				continue
			}
			if errW != nil {
				continue
			}
			if !reflect.DeepEqual(pg.Table, pw.Table) || !reflect.DeepEqual(noteKeys(pg), noteKeys(pw)) || pg.Preset != pw.Preset {
				t.Errorf("%s %s: from the server\n%+v %v\nfrom the DDL\n%+v %v\ncolumns read: %+v", f, name, pg.Table, notes(pg), pw.Table, notes(pw), got.Columns)
			}
		}
	}

	// The values present: DONE and DEAD in the rows are sent and failed,
	// read from the most recent rows.
	db := testenv.NewDB(t, "testdata/init/custom.sql")
	db.Exec(t, "INSERT INTO events (target, body, state) VALUES ('x', 'a', 'NEW'), ('x', 'b', 'DONE'), ('x', 'c', 'DEAD'), ('x', 'd', 'DONE')")
	db.Exec(t, "INSERT INTO mq_outbox (msg_key, topic, msg_content, create_time) VALUES ('k', 't', 'c', 1718000000123)")
	db.WaitReplicated(t, 30*time.Second)
	ev, err := Describe(ctx, db.Replica, db.Name, "events")
	if err != nil {
		t.Fatal(err)
	}
	p, err := Propose(ev)
	if err != nil {
		t.Fatal(err)
	}
	if s := p.Table.Statuses; s.Pending != "NEW" || s.Sent != "DONE" || s.Failed != "DEAD" {
		t.Errorf("events with rows: %+v (values read: %v)", s, ev.Values)
	}
	mq, err := Describe(ctx, db.Replica, db.Name, "mq_outbox")
	if err != nil {
		t.Fatal(err)
	}
	if p, err := Propose(mq); err != nil || p.Table.CreatedAtEpoch != "ms" || len(p.Notes) != 1 {
		t.Errorf("mq_outbox with a row: %v %+v %v", err, p.Table, notes(p))
	}
	if _, err := Describe(ctx, db.Replica, db.Name, "nope"); err == nil || err.Error() != db.Name+".nope: no such table on the source (or the user cannot see it)" {
		t.Errorf("a table that is not there: %v", err)
	}
}
