package sweeper

import (
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"go.uber.org/zap/zaptest"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
)

// openInZone opens the stack's primary with sessions in zone (the DSN's
// time_zone: a session setting, the server's globals are not touched), or
// in the server's own zone when zone is "".
func openInZone(t *testing.T, zone string) *testenv.DB {
	t.Helper()
	c, err := mysql.ParseDSN(testenv.PrimaryDSN)
	if err != nil {
		t.Fatal(err)
	}
	if zone != "" {
		c.Params = map[string]string{"time_zone": "'" + zone + "'"}
	}
	return &testenv.DB{Primary: testenv.Open(t, c.FormatDSN(), "")}
}

// ReadClock reads a session's zone and its offsets at the probes, on both
// flavours: a fixed offset, and the server's own zone.
func TestReadClock(t *testing.T) {
	testenv.Integration(t)
	c, err := ReadClock(t.Context(), openInZone(t, "+05:45").Primary)
	if err != nil {
		t.Fatal(err)
	}
	if c.TimeZone != "+05:45" || !c.Steady() || c.Offset() != 5*time.Hour+45*time.Minute {
		t.Errorf("session at +05:45: %+v", c)
	}
	sys, err := ReadClock(t.Context(), openInZone(t, "").Primary)
	if err != nil {
		t.Fatal(err)
	}
	if sys.TimeZone == "" || sys.SystemZone == "" || sys.SameZone(c) {
		t.Errorf("the server's own zone: %+v", sys)
	}
	t.Logf("the stack's primary: %s", sys)
}

// A pre-check on a server whose clock is not the primary's runs in the
// primary's offset, again on later looks, and leaves no session in that
// zone in the pool; where the clocks agree it runs as it is. Here the
// "primary" is a pool whose sessions are at +09:00 and the "replica" one in
// the server's own zone (UTC on the stack).
func TestPrecheckRunsInThePrimarysZone(t *testing.T) {
	testenv.Integration(t)
	replica := openInZone(t, "").Primary
	replica.SetMaxOpenConns(1) // a session left at +09:00 would be the next one used
	own, err := ReadClock(t.Context(), replica)
	if err != nil {
		t.Fatal(err)
	}
	if own.Offset() == 9*time.Hour {
		t.Skip("the server's own zone is +09:00: nothing to correct")
	}
	const q = "SELECT DATE_FORMAT(NOW(), '%Y-%m-%d %H:%i')"
	// wallAt runs the pre-check and checks it saw the wall clock at offset.
	wallAt := func(s *Sweeper, offset time.Duration) {
		t.Helper()
		before := time.Now().UTC().Add(offset).Format("2006-01-02 15:04")
		var got string
		if err := s.precheck(t.Context(), q, nil, &got); err != nil {
			t.Fatal(err)
		}
		after := time.Now().UTC().Add(offset).Format("2006-01-02 15:04")
		if got != before && got != after {
			t.Errorf("pre-check NOW() = %s, want %s (UTC%s)", got, before, FormatOffset(offset))
		}
		var tz string
		if err := replica.QueryRow("SELECT @@session.time_zone").Scan(&tz); err != nil || tz != own.TimeZone {
			t.Errorf("after the pre-check the pool's session is in %q (%v), want %q", tz, err, own.TimeZone)
		}
	}

	s := &Sweeper{replica: replica, primary: openInZone(t, "+09:00").Primary, log: zaptest.NewLogger(t)}
	wallAt(s, 9*time.Hour) // found different, asked again
	if !s.zones.correctUntil.After(time.Now()) {
		t.Fatal("the difference was not remembered")
	}
	wallAt(s, 9*time.Hour) // set first

	same := &Sweeper{replica: replica, primary: openInZone(t, "").Primary, log: zaptest.NewLogger(t)}
	wallAt(same, own.Offset())
	if !same.zones.correctUntil.IsZero() {
		t.Error("one zone on both, yet the pre-checks were corrected")
	}
}
