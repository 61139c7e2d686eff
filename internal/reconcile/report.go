package reconcile

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// IDs is one finding: how many message ids, and the first of them (up to
// reconcile.max_ids).
type IDs struct {
	Count int64    `json:"count"`
	IDs   []string `json:"ids"`
}

func (l *IDs) add(id string, max int) {
	l.Count++
	if len(l.IDs) < max {
		l.IDs = append(l.IDs, id)
	}
}

// MarshalJSON writes no ids as [], not null, for scripts.
func (l IDs) MarshalJSON() ([]byte, error) {
	type ids IDs
	if l.IDs == nil {
		l.IDs = []string{}
	}
	return json.Marshal(ids(l))
}

func (l IDs) list() string {
	s := strings.Join(l.IDs, ", ")
	if more := l.Count - int64(len(l.IDs)); more > 0 {
		s += fmt.Sprintf(" ... and %d more", more)
	}
	return s
}

// Report is the result of one run.
type Report struct {
	Relay        string    `json:"relay"`
	StartedAt    time.Time `json:"started_at"`
	Seconds      float64   `json:"seconds"`
	Since        time.Time `json:"since"`
	Until        time.Time `json:"until"`
	GracePeriod  string    `json:"grace_period"`
	PendingAfter string    `json:"pending_after"`
	Repair       bool      `json:"repair"`
	// Differences counts every finding: missing, duplicates, FAILED on
	// either side, pending too long, processed without an outbox row.
	Differences int64             `json:"differences"`
	Tables      []*TableReport    `json:"tables"`
	Consumers   []*ConsumerReport `json:"consumers"`
	// Error is set on a run that could not finish (kept in Redis for
	// `status`); the findings until then are partial.
	Error string `json:"error,omitempty"`
}

// TableReport is one outbox table in the window.
type TableReport struct {
	Table string `json:"table"`
	// Skipped says why the table was not compared.
	Skipped string `json:"skipped,omitempty"`
	Rows    int64  `json:"rows"`
	Sent    int64  `json:"sent"`
	// PendingStale are rows still pending or sending pending_after after
	// they were created; Failed are rows FAILED in the outbox.
	PendingStale IDs           `json:"pending_stale"`
	Failed       IDs           `json:"failed"`
	Consumers    []*PairReport `json:"consumers"`
	Repair       *RepairReport `json:"repair,omitempty"`
	pairs        map[string]*PairReport
}

// PairReport is one outbox table as one consumer saw it.
type PairReport struct {
	Consumer string `json:"consumer"`
	// Expected are the SENT rows this consumer should have (its filter).
	Expected  int64 `json:"expected"`
	Processed int64 `json:"processed"`
	// InGrace were sent within the grace period and are not recorded yet:
	// not missing, not yet.
	InGrace int64 `json:"in_grace"`
	// Retrying are recorded but neither processed nor failed yet.
	Retrying   int64 `json:"retrying"`
	Missing    IDs   `json:"missing"`
	Duplicates IDs   `json:"duplicates"`
	Failed     IDs   `json:"failed"`
}

// RepairReport is what --repair did, or would do, for one table.
type RepairReport struct {
	// Repairable are rows missing at every consumer that should have them
	// and recorded by none: what --repair resets to pending.
	Repairable IDs `json:"repairable"`
	// Kept are rows missing at some consumer but recorded by another:
	// resending them would deliver them twice there, so they are left.
	Kept IDs `json:"kept"`
	// Reset are the rows reset; Changed moved since they were read (no
	// longer SENT, or a new version) and were left alone.
	Reset   IDs   `json:"reset"`
	Changed int64 `json:"changed"`
	// Note says why nothing can be reset (a table the sweeper cannot send).
	Note string `json:"note,omitempty"`
}

// ConsumerReport is what one consumer recorded that no outbox row explains.
type ConsumerReport struct {
	Consumer string `json:"consumer"`
	// InboxRows is how many inbox rows in the window were looked up.
	InboxRows int64 `json:"inbox_rows"`
	Orphans   IDs   `json:"processed_without_outbox_row"`
	// Skipped says why the inbox was not compared with the outbox.
	Skipped string `json:"skipped,omitempty"`
}

// count sums the findings.
func (r *Report) count() {
	r.Differences = 0
	for _, t := range r.Tables {
		r.Differences += t.PendingStale.Count + t.Failed.Count
		for _, p := range t.Consumers {
			r.Differences += p.Missing.Count + p.Duplicates.Count + p.Failed.Count
		}
	}
	for _, c := range r.Consumers {
		r.Differences += c.Orphans.Count
	}
}

// JSON writes the report as one indented JSON document.
func (r *Report) JSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// Text writes the report for people: the counts as tables, then each
// finding with its ids.
func (r *Report) Text(w io.Writer) {
	fmt.Fprintf(w, "reconcile %s: outbox rows created %s .. %s, grace period %s, pending after %s (%.1fs)\n\n",
		r.Relay, r.Since.Format(time.RFC3339), r.Until.Format(time.RFC3339), r.GracePeriod, r.PendingAfter, r.Seconds)
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "TABLE\tROWS\tSENT\tPENDING TOO LONG\tFAILED\t")
	for _, t := range r.Tables {
		if t.Skipped != "" {
			fmt.Fprintf(tw, "%s\tskipped: %s\t\t\t\t\n", t.Table, t.Skipped)
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t\n", t.Table, t.Rows, t.Sent, t.PendingStale.Count, t.Failed.Count)
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
	fmt.Fprintln(tw, "TABLE\tCONSUMER\tEXPECTED\tPROCESSED\tIN GRACE\tRETRYING\tMISSING\tDUPLICATES\tFAILED\t")
	for _, t := range r.Tables {
		for _, p := range t.Consumers {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n", t.Table, p.Consumer, p.Expected, p.Processed,
				p.InGrace, p.Retrying, p.Missing.Count, p.Duplicates.Count, p.Failed.Count)
		}
	}
	_ = tw.Flush()
	if len(r.Consumers) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(tw, "CONSUMER\tINBOX ROWS\tPROCESSED WITHOUT OUTBOX ROW\t")
		for _, c := range r.Consumers {
			if c.Skipped != "" {
				fmt.Fprintf(tw, "%s\t%d\tnot checked: %s\t\n", c.Consumer, c.InboxRows, c.Skipped)
				continue
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t\n", c.Consumer, c.InboxRows, c.Orphans.Count)
		}
		_ = tw.Flush()
	}
	r.findings(w)
	r.repairs(w)
	if r.Error != "" {
		fmt.Fprintf(w, "\nincomplete: %s\n", r.Error)
	}
	if r.Differences == 0 {
		fmt.Fprintln(w, "\nno differences")
		return
	}
	fmt.Fprintf(w, "\n%d differences\n", r.Differences)
}

func (r *Report) findings(w io.Writer) {
	var lines []string
	line := func(what, where string, l IDs) {
		if l.Count > 0 {
			lines = append(lines, fmt.Sprintf("  %-28s %s (%d): %s", what, where, l.Count, l.list()))
		}
	}
	for _, t := range r.Tables {
		line("pending too long", t.Table, t.PendingStale)
		line("FAILED in the outbox", t.Table, t.Failed)
		for _, p := range t.Consumers {
			where := t.Table + " -> " + p.Consumer
			line("sent, never processed", where, p.Missing)
			line("processed more than once", where, p.Duplicates)
			line("FAILED in the inbox", where, p.Failed)
		}
	}
	for _, c := range r.Consumers {
		line("processed, no outbox row", c.Consumer, c.Orphans)
	}
	if len(lines) > 0 {
		fmt.Fprintln(w, "\nfindings (message ids):")
		fmt.Fprintln(w, strings.Join(lines, "\n"))
	}
}

func (r *Report) repairs(w io.Writer) {
	var lines []string
	for _, t := range r.Tables {
		rp := t.Repair
		if rp == nil || (rp.Repairable.Count == 0 && rp.Kept.Count == 0) {
			continue
		}
		switch {
		case rp.Note != "":
			lines = append(lines, fmt.Sprintf("  %s: %d rows no consumer processed, not reset: %s", t.Table, rp.Repairable.Count, rp.Note))
		case r.Repair:
			lines = append(lines, fmt.Sprintf("  %s: reset to pending %d rows no consumer processed (the sweeper sends them again): %s",
				t.Table, rp.Reset.Count, rp.Reset.list()))
			if rp.Changed > 0 {
				lines = append(lines, fmt.Sprintf("  %s: %d rows changed since they were read, left alone", t.Table, rp.Changed))
			}
		case rp.Repairable.Count > 0:
			lines = append(lines, fmt.Sprintf("  %s: --repair would reset to pending %d rows no consumer processed: %s",
				t.Table, rp.Repairable.Count, rp.Repairable.list()))
		}
		if rp.Kept.Count > 0 {
			lines = append(lines, fmt.Sprintf("  %s: %d rows missing at one consumer but processed by another, never reset (republish them to that consumer by hand): %s",
				t.Table, rp.Kept.Count, rp.Kept.list()))
		}
	}
	if len(lines) > 0 {
		fmt.Fprintln(w, "\nrepair:")
		fmt.Fprintln(w, strings.Join(lines, "\n"))
	}
}
