package preflight

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/binlog-relay/binlog-relay/pkg/binlog"
)

// fakeRetention is a server's retention settings: its variables, and
// mysql.rds_configuration's row when rds is set (nil: no such table).
type fakeRetention struct {
	vars map[string]string
	rds  *sql.NullString
	err  error
}

func (f fakeRetention) Variable(_ context.Context, name string) (string, bool) {
	v, ok := f.vars[name]
	return v, ok
}

func (f fakeRetention) RDSRetentionHours(context.Context) (sql.NullString, bool, error) {
	if f.err != nil {
		return sql.NullString{}, false, f.err
	}
	if f.rds == nil {
		return sql.NullString{}, false, nil
	}
	return *f.rds, true, nil
}

func rdsHours(v string) *sql.NullString { return &sql.NullString{String: v, Valid: true} }

// Which setting decides, in what unit, against the floor; 0 everywhere is
// "never purged by time" (Info, not a warning).
func TestBinlogRetention(t *testing.T) {
	day := 24 * time.Hour
	cases := []struct {
		name   string
		src    fakeRetention
		floor  time.Duration
		flavor string
		sev    Severity
		want   []string // in the text, in order
	}{
		{"MySQL 8 default", fakeRetention{vars: map[string]string{"binlog_expire_logs_seconds": "2592000", "expire_logs_days": "0"}}, day, binlog.FlavorMySQL, "", nil},
		{"MySQL 9 one hour", fakeRetention{vars: map[string]string{"binlog_expire_logs_seconds": "3600", "binlog_expire_logs_auto_purge": "1"}}, day, binlog.FlavorMySQL,
			Warning, []string{"binlog retention is 1h (binlog_expire_logs_seconds=3600), under source.min_binlog_retention (24h)", "cannot resume", "sweeper", "SET PERSIST binlog_expire_logs_seconds = 86400"}},
		{"seconds win over days", fakeRetention{vars: map[string]string{"binlog_expire_logs_seconds": "3600", "expire_logs_days": "7"}}, day, binlog.FlavorMySQL,
			Warning, []string{"1h (binlog_expire_logs_seconds=3600)"}},
		{"MySQL 8 old style: days when seconds are 0", fakeRetention{vars: map[string]string{"binlog_expire_logs_seconds": "0", "expire_logs_days": "7"}}, 10 * day, binlog.FlavorMySQL,
			Warning, []string{"binlog retention is 7d (expire_logs_days=7), under source.min_binlog_retention (10d)", "expire_logs_days = 10"}},
		{"MariaDB 10.6+: seconds and their days", fakeRetention{vars: map[string]string{"binlog_expire_logs_seconds": "1800", "expire_logs_days": "0.020833"}}, day, binlog.FlavorMariaDB,
			Warning, []string{"binlog retention is 30m (binlog_expire_logs_seconds=1800)", "SET GLOBAL binlog_expire_logs_seconds = 86400"}},
		{"MariaDB before 10.6: days only", fakeRetention{vars: map[string]string{"expire_logs_days": "2"}}, day, binlog.FlavorMariaDB, "", nil},
		{"decimal days, rounded to seconds", fakeRetention{vars: map[string]string{"binlog_expire_logs_seconds": "0", "expire_logs_days": "0.041667"}}, day, binlog.FlavorMariaDB,
			Warning, []string{"binlog retention is 1h (expire_logs_days=0.041667)"}},
		{"0 everywhere", fakeRetention{vars: map[string]string{"binlog_expire_logs_seconds": "0", "expire_logs_days": "0"}}, day, binlog.FlavorMariaDB,
			Info, []string{"never purged by time (binlog_expire_logs_seconds=0, expire_logs_days=0)"}},
		{"auto purge off", fakeRetention{vars: map[string]string{"binlog_expire_logs_seconds": "3600", "binlog_expire_logs_auto_purge": "0"}}, day, binlog.FlavorMySQL,
			Info, []string{"never purged by time (binlog_expire_logs_auto_purge=OFF)"}},
		{"at the floor", fakeRetention{vars: map[string]string{"binlog_expire_logs_seconds": "86400"}}, day, binlog.FlavorMySQL, "", nil},
		{"a floor of its own", fakeRetention{vars: map[string]string{"binlog_expire_logs_seconds": "3600"}}, 2 * time.Hour, binlog.FlavorMySQL,
			Warning, []string{"1h", "source.min_binlog_retention (2h)", "= 7200"}},
		{"RDS hours win over the variables", fakeRetention{vars: map[string]string{"binlog_expire_logs_seconds": "3600"}, rds: rdsHours("48")}, day, binlog.FlavorMySQL, "", nil},
		{"RDS under the floor", fakeRetention{vars: map[string]string{"binlog_expire_logs_seconds": "2592000"}, rds: rdsHours("12")}, day, binlog.FlavorMySQL,
			Warning, []string{"binlog retention is 12h (binlog retention hours=12 in mysql.rds_configuration)", "CALL mysql.rds_set_configuration('binlog retention hours', 24)"}},
		{"RDS NULL", fakeRetention{vars: map[string]string{"binlog_expire_logs_seconds": "2592000"}, rds: &sql.NullString{}}, day, binlog.FlavorMySQL,
			Warning, []string{"binlog retention is 0h (binlog retention hours is NULL, which RDS treats as 0 hours)", "rds_set_configuration('binlog retention hours', 24)"}},
		{"Aurora NULL", fakeRetention{vars: map[string]string{"aurora_version": "3.08.0", "binlog_expire_logs_seconds": "2592000"}, rds: &sql.NullString{}}, day, binlog.FlavorMySQL,
			Warning, []string{"binlog retention hours is NULL: Aurora removes binlogs lazily", "rds_set_configuration('binlog retention hours', 24)"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, ok, err := readRetention(context.Background(), tc.src)
			if err != nil || !ok {
				t.Fatalf("read: %v %v", ok, err)
			}
			sev, text := judgeRetention(r, tc.floor, tc.flavor)
			if sev != tc.sev {
				t.Fatalf("severity %q, want %q: %s", sev, tc.sev, text)
			}
			rest := text
			for _, w := range tc.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("%q not in (or not after the previous part of) %q", w, text)
				}
				rest = rest[i+len(w):]
			}
		})
	}
}

// A server that shows no retention variable says nothing; an error
// reading RDS's table is the caller's to judge.
func TestBinlogRetentionUnknown(t *testing.T) {
	if _, ok, err := readRetention(context.Background(), fakeRetention{vars: map[string]string{}}); ok || err != nil {
		t.Fatalf("no variables: %v %v", ok, err)
	}
	denied := errors.New("SELECT command denied")
	if _, _, err := readRetention(context.Background(), fakeRetention{err: denied}); !errors.Is(err, denied) {
		t.Fatalf("error: %v", err)
	}
	r, ok, err := readRetention(context.Background(), noRDS{fakeRetention{vars: map[string]string{"binlog_expire_logs_seconds": "3600"}, err: denied}})
	if err != nil || !ok || r.keep != time.Hour {
		t.Fatalf("without RDS: %+v %v %v", r, ok, err)
	}
}

func TestRetentionSpan(t *testing.T) {
	for d, want := range map[time.Duration]string{0: "0h", 30 * time.Minute: "30m", time.Hour: "1h",
		90 * time.Minute: "1h30m", 24 * time.Hour: "24h", 36 * time.Hour: "36h", 7 * 24 * time.Hour: "7d", 90 * 24 * time.Hour: "90d"} {
		if got := retentionSpan(d); got != want {
			t.Errorf("%v: %q, want %q", d, got, want)
		}
	}
}
