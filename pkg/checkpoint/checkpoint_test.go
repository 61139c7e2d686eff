package checkpoint

import (
	"strings"
	"testing"
	"time"

	"github.com/binlog-relay/binlog-relay/pkg/binlog"
)

func TestCheckpointRoundTrip(t *testing.T) {
	at := time.Date(2026, 11, 29, 12, 0, 0, 123, time.UTC)
	for _, p := range []binlog.Position{
		{Flavor: binlog.FlavorMariaDB, GTIDSet: "0-1-42", File: "binlog.000003", Pos: 1234},
		{Flavor: binlog.FlavorMariaDB, GTIDSet: "0-1-42,1-2-7,5-9-18446744073709551615", File: "b.000001", Pos: 4},
		{Flavor: binlog.FlavorMySQL, GTIDSet: "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5:7-9,4e11fa47-71ca-11e1-9e33-c80aa9429562:1-100", File: "mysql-bin.000002", Pos: 99},
		{Flavor: binlog.FlavorMySQL, File: "mysql-bin.000002", Pos: 4}, // GTID off
	} {
		cp := FromPosition(p, "server_id=2", at)
		raw, err := cp.Encode()
		if err != nil {
			t.Fatal(err)
		}
		back, err := Decode(raw)
		if err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		if back.Position() != p || back.Server != "server_id=2" || !back.SavedAt.Equal(at) {
			t.Fatalf("round trip of %+v gave %+v", p, back)
		}
		// The GTID set also survives the tracker (parse -> render).
		if p.HasGTID() {
			tr, err := binlog.NewTracker(back.Position())
			if err != nil {
				t.Fatal(err)
			}
			if got := tr.Position(); got != p {
				t.Fatalf("tracker rendered %+v, want %+v", got, p)
			}
		}
	}
}

func TestDecodeRefusesGarbage(t *testing.T) {
	for raw, want := range map[string]string{
		`not json`:             "decoding checkpoint",
		`{"flavor":"mariadb"}`: "names no position",
		`{}`:                   "names no position",
	} {
		if _, err := Decode([]byte(raw)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Decode(%q) = %v, want an error containing %q", raw, err, want)
		}
	}
}
