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
		{Flavor: binlog.FlavorMySQL, GTIDSet: "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5:blue:1-3:red:7", File: "mysql-bin.000009", Pos: 157}, // tagged GTIDs, MySQL 8.3+
		{Flavor: binlog.FlavorMySQL, File: "mysql-bin.000002", Pos: 4},                                                                       // GTID off
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

// A checkpoint an older relay saved with one GTID per (domain, server_id)
// after a local write on the replica or a switchover: MariaDB refuses it as a
// start position (ERROR 1943, duplicate domain id). It loads as the last
// GTID of each domain, which is the highest sequence number there.
func TestDecodeNormalisesAnOldMariaDBCheckpoint(t *testing.T) {
	for stored, want := range map[string]string{
		"0-1-90872,0-2-90873":            "0-2-90873",
		"0-2-90873,0-1-90872":            "0-2-90873",
		"0-1-5,1-3-7,0-9-4,1-1-8, 2-1-1": "0-1-5,1-1-8,2-1-1",
		"0-1-42":                         "0-1-42",
	} {
		raw := []byte(`{"flavor":"mariadb","gtid_set":"` + stored + `","binlog_file":"b.000001","binlog_pos":4}`)
		cp, err := Decode(raw)
		if err != nil {
			t.Fatalf("%s: %v", stored, err)
		}
		if cp.GTIDSet != want {
			t.Errorf("stored %q loaded as %q, want %q", stored, cp.GTIDSet, want)
		}
		if again, _ := cp.Encode(); !strings.Contains(string(again), `"gtid_set":"`+want+`"`) {
			t.Errorf("saved back as %s, want gtid_set %q", again, want)
		}
	}
	if _, err := Decode([]byte(`{"flavor":"mariadb","gtid_set":"0-1"}`)); err == nil || !strings.Contains(err.Error(), "0-1") {
		t.Errorf("malformed GTID accepted or not named: %v", err)
	}
}

// The stored form carries its version; a checkpoint saved before the field
// existed reads as version 1, and one from a newer form is refused with a
// reason instead of being misread.
func TestStoredFormVersion(t *testing.T) {
	raw, err := Checkpoint{Flavor: "mariadb", GTIDSet: "0-1-42"}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(raw), `{"version":1,"flavor":"mariadb","gtid_set":"0-1-42"`) {
		t.Fatalf("stored form %s", raw)
	}
	old, err := Decode([]byte(`{"flavor":"mariadb","gtid_set":"0-1-42","saved_at":"2026-01-01T00:00:00Z"}`))
	if err != nil || old.Version != 1 || old.GTIDSet != "0-1-42" {
		t.Fatalf("a checkpoint without version: %+v, %v", old, err)
	}
	_, err = Decode([]byte(`{"version":2,"flavor":"mariadb","gtid_set":"0-1-42"}`))
	if err == nil || !strings.Contains(err.Error(), "version 2 is newer than this reader's 1") {
		t.Fatalf("a newer stored form: %v", err)
	}
}
