package command

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/replay"
)

func TestParseSince(t *testing.T) {
	now := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		in      string
		want    time.Time
		wantErr bool
	}{
		{"2024-05-01T10:00:00Z", time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC), false},
		{"2024-05-01T10:00:00+02:00", time.Date(2024, 5, 1, 8, 0, 0, 0, time.UTC), false},
		{"2h", now.Add(-2 * time.Hour), false},
		{"90s", now.Add(-90 * time.Second), false},
		{"0s", time.Time{}, true},
		{"-1h", time.Time{}, true},
		{"yesterday", time.Time{}, true},
		{"2024-05-01", time.Time{}, true},
	}
	for _, c := range cases {
		got, err := ParseSince(c.in, now)
		switch {
		case c.wantErr && err == nil:
			t.Errorf("ParseSince(%q) = %s, want an error", c.in, got)
		case c.wantErr && err.Error() != `"`+c.in+`" is neither an RFC 3339 time nor a positive duration like 2h`:
			t.Errorf("ParseSince(%q): error %q", c.in, err)
		case !c.wantErr && (err != nil || !got.Equal(c.want)):
			t.Errorf("ParseSince(%q) = %s, %v; want %s", c.in, got, err, c.want)
		}
	}
}

// parse registers a command's flags on a fresh set and parses args.
func parse(t *testing.T, flags func(*flag.FlagSet), args ...string) {
	t.Helper()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	flags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
}

func TestRequeueOptions(t *testing.T) {
	var o RequeueOptions
	parse(t, o.Flags, "--id", "7, 8,", "--id", "9", "--since", "1h", "--table", "shop.outbox")
	if err := o.Validate(); err == nil || err.Error() != "requeue: --failed is required (it names what is requeued: FAILED rows)" {
		t.Errorf("without --failed: %v", err)
	}
	if strings.Join(o.IDs, " ") != "7 8 9" || o.Table != "shop.outbox" || time.Since(o.Since).Round(time.Minute) != time.Hour {
		t.Errorf("parsed %+v", o)
	}
	o.Failed = true
	if err := o.Validate(); err != nil {
		t.Errorf("with --failed: %v", err)
	}
}

func TestReconcileOptions(t *testing.T) {
	cases := []struct {
		args []string
		want string // Validate's error, "" for none
	}{
		{nil, ""},
		{[]string{"--since", "2h", "--until", "1h", "--format", "json", "--table", "a.b", "--table", "c.d", "--repair"}, ""},
		{[]string{"--format", "yaml"}, `reconcile: --format "yaml" is not table or json`},
		{[]string{"--since", "1h", "--until", "2h"}, "reconcile: --until must be after --since"},
		{[]string{"--since", "1h", "--until", "1h"}, "reconcile: --until must be after --since"},
	}
	for _, c := range cases {
		var o ReconcileOptions
		parse(t, o.Flags, c.args...)
		err := o.Validate()
		if got := errString(err); got != c.want {
			t.Errorf("%v: Validate: %q, want %q", c.args, got, c.want)
		}
	}
	var o ReconcileOptions
	parse(t, o.Flags, "--table", "a.b", "--table", "c.d", "--repair")
	if o.Format != "table" || !o.Repair || strings.Join(o.Tables, " ") != "a.b c.d" {
		t.Errorf("parsed %+v", o)
	}
}

func TestReplayOptions(t *testing.T) {
	const resume = "replay: --resume continues the saved replay with its own range and destination; drop --since, --until, --ids, --where, --exchange and --routing-key (or start a new replay without --resume)"
	cases := []struct {
		args []string
		want string
	}{
		{nil, ""},
		{[]string{"--resume"}, ""},
		{[]string{"--resume", "--rate", "0", "--chunk-size", "10"}, ""},
		{[]string{"--resume", "--ids", "1-10"}, resume},
		{[]string{"--exchange", "x", "--resume"}, resume},
		{[]string{"--resume", "--routing-key", "k"}, resume},
		{[]string{"--since", "1h", "--until", "2h"}, "replay: --until must be after --since"},
		{[]string{"--chunk-size", "0"}, "replay: --chunk-size 0 is not between 1 and 100000"},
		{[]string{"--chunk-size", "100001"}, "replay: --chunk-size 100001 is not between 1 and 100000"},
		{[]string{"--samples", "0"}, "replay: --samples must be positive"},
		{[]string{"--progress-interval", "0s"}, "replay: --progress-interval must be positive"},
	}
	for _, c := range cases {
		var o ReplayOptions
		parse(t, o.Flags, c.args...)
		if got := errString(o.Validate()); got != c.want {
			t.Errorf("%v: Validate: %q, want %q", c.args, got, c.want)
		}
	}
	var o ReplayOptions
	parse(t, o.Flags)
	if o.Rate != 1000 || o.ChunkSize != 1000 || o.Samples != 5 || o.ProgressEvery != 10*time.Second || o.MetricsAddr != "" {
		t.Errorf("defaults %+v", o)
	}
	parse(t, o.Flags, "--ids", "101-2100", "--rate", "0")
	if want := (replay.IDRange{From: 101, To: 2100}); o.Range.IDs == nil || *o.Range.IDs != want || o.Rate != 0 {
		t.Errorf("parsed %+v", o)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
