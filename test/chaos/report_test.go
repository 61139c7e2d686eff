package chaos

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// artifactsDir is where a failed schedule's history and report go
// ($CHAOS_ARTIFACTS; by default under the system's temp dir, kept after
// the test).
var artifactsDir = filepath.Join(os.TempDir(), "binlog-relay-chaos")

// writeArtifacts writes a failed schedule's schedule, history, report and
// relay logs into a directory of its own and returns its path.
func writeArtifacts(t *testing.T, e *env, h *History, res *result) string {
	s := res.s
	name := fmt.Sprintf("%s-%s-seed%d-%s", time.Now().Format("20060102-150405"), s.Flavor, s.Seed, strings.ReplaceAll(s.Config.String(), "/", "-"))
	if s.Name != "" {
		name = fmt.Sprintf("%s-%s-%s", time.Now().Format("20060102-150405"), s.Flavor, s.Name)
	}
	dir := filepath.Join(artifactsDir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Logf("artifacts: %v", err)
		return "(not written: " + err.Error() + ")"
	}
	write := func(file string, v any) {
		b, err := json.MarshalIndent(v, "", " ")
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, file), b, 0o644)
		}
		if err != nil {
			t.Logf("artifacts: %s: %v", file, err)
		}
	}
	write("schedule.json", s)
	write("history.json", h)
	write("report.json", res.r)
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n\nreplay: %s\n\n%s\n\n", describe(s), s.Replay(), res.line())
	for _, p := range res.r.Problems() {
		fmt.Fprintf(&b, "%s\n", p)
	}
	for _, m := range res.errs {
		fmt.Fprintf(&b, "%s\n", m)
	}
	for name, fs := range map[string][]Finding{"lost": res.r.Lost, "drafts": res.r.Drafts, "pending": res.r.Pending, "order": res.r.Order,
		"rolled back delivered": res.r.RolledBack, "never to deliver, delivered": res.r.Never, "unknown": res.r.Unknown, "failed": res.r.Failed,
		"duplicates": res.r.Dups, "woken leaders": res.r.Woken, "not into the stream": res.r.OffStream} {
		if len(fs) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n%s (%d):\n", name, len(fs))
		for _, f := range fs[:min(len(fs), 200)] {
			fmt.Fprintf(&b, "  %s\n", f)
		}
	}
	if m := matchIssue(s, res.r); m != "" {
		fmt.Fprintf(&b, "\nmatches: %s\n", m)
	}
	b.WriteString("\ntimeline (per 5 s: rows committed to deliver, first deliveries by source, duplicates):\n")
	b.WriteString(timeline(h))
	b.WriteString("\njournal:\n")
	for _, j := range h.Journal {
		fmt.Fprintf(&b, "  %s\n", j)
	}
	if err := os.WriteFile(filepath.Join(dir, "report.txt"), []byte(b.String()), 0o644); err != nil {
		t.Logf("artifacts: report.txt: %v", err)
	}
	for i, r := range e.relays {
		for k, l := range r.logs {
			if data, err := os.ReadFile(l); err == nil {
				_ = os.WriteFile(filepath.Join(dir, fmt.Sprintf("relay%d-run%d.log", i, k)), data, 0o644)
			}
		}
	}
	return dir
}

// timeline buckets the history by 5 s: what was committed and what
// arrived, to see stalls and catch-ups at a glance.
func timeline(h *History) string {
	const step = 5 * time.Second
	type bucket struct {
		committed, first, dups int
		src                    map[string]int
	}
	var bs []bucket
	at := func(t time.Time) int {
		i := max(int(t.Sub(h.Start)/step), 0)
		for len(bs) <= i {
			bs = append(bs, bucket{src: map[string]int{}})
		}
		return i
	}
	for _, tx := range h.Txs {
		if tx.Outcome != Committed {
			continue
		}
		for _, r := range tx.Rows {
			if r.Expect == Deliver {
				bs[at(tx.At)].committed++
			}
		}
	}
	seen := map[string]bool{}
	for _, d := range sortedByTime(h.Deliveries) {
		k := d.ID + "\x00" + normalize(d.Body)
		i := at(d.At)
		if seen[k] {
			bs[i].dups++
			continue
		}
		seen[k] = true
		bs[i].first++
		bs[i].src[d.Src]++
	}
	var b strings.Builder
	for i, x := range bs {
		fmt.Fprintf(&b, "  %5.0fs  committed %6d  delivered %6d (queue %d, stream %d)  again %d\n",
			(time.Duration(i) * step).Seconds(), x.committed, x.first, x.src["queue"], x.src["stream"], x.dups)
	}
	return b.String()
}

func sortedByTime(ds []Delivery) []Delivery {
	out := append([]Delivery(nil), ds...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].At.Before(out[j].At) })
	return out
}

// matchIssue names the known loss path (issue 37) a failed run looks like,
// from the faults its findings are blamed on: a lead, not a diagnosis.
func matchIssue(s Schedule, r *Report) string {
	var out []string
	blamed := func(fs []Finding, kind string) bool {
		for _, f := range fs {
			if strings.HasPrefix(f.Fault, kind+" ") {
				return true
			}
		}
		return false
	}
	blamedWith := func(fs []Finding, kind, what string) bool {
		for _, f := range fs {
			if strings.HasPrefix(f.Fault, kind+" ") && strings.Contains(f.What, what) {
				return true
			}
		}
		return false
	}
	over := func(kind string) bool { d := r.Duplicates[kind]; return d != nil && len(d.Over) > 0 }
	if s.Config.Stream && (blamed(r.Lost, "stream-blackhole") || blamed(r.Pending, "stream-blackhole") || blamed(r.OffStream, "stream-blackhole") || over("stream-blackhole")) {
		out = append(out, "issue 37 item 1 (a failed stream lane lets the checkpoint pass unconfirmed rows)")
	}
	if s.Config.Stream && (blamed(r.Lost, "config-change") || blamed(r.Pending, "config-change") || over("config-change")) {
		out = append(out, "issue 37 item 2 (publishing ids depend on settings seq_scope does not cover)")
	}
	if over("cutover-2step") || blamed(r.Pending, "cutover-2step") {
		out = append(out, "issue 37 item 3 (a two-step cut-over leaves the copies PENDING)")
	}
	if blamedWith(r.Pending, "rename-rotation", "recorded nowhere") || blamed(r.Lost, "rename-rotation") {
		out = append(out, "issue 37 item 4 (a failure record in the window of an archival rename is lost)")
	}
	if len(r.Woken) > 0 || (over("relay-pause") && s.Relays > 1) {
		out = append(out, "issue 37 item 5 (a leader paused past its lease publishes when it wakes)")
	}
	if len(r.Never) > 0 && s.Traffic.Decoy > 0 {
		out = append(out, "issue 37 item 6 (table names folded to lower case)")
	}
	if len(r.Drafts) > 0 && s.Traffic.PartialJSON {
		out = append(out, "issue 37 item 7 (partial JSON updates publish the draft)")
	}
	if over("relay-pause") && s.Relays == 1 {
		out = append(out, "issue 37 item 8 (a paused relay's sweeper sends its backlog twice)")
	}
	return strings.Join(out, "; ")
}

// summary adds up schedules for the table make chaos ends with.
type summary struct {
	mu      sync.Mutex
	results []*result
}

func newSummary() *summary { return &summary{} }

func (s *summary) add(r *result) {
	if r == nil || r.r == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.results = append(s.results, r)
}

// table is the summary: schedules, configurations, faults drawn per kind
// with their duplicates against the bound, and everything held against
// the runs.
func (s *summary) table() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	if len(s.results) == 0 {
		return "chaos summary: no schedule ran\n"
	}
	var took time.Duration
	configs := map[string]int{}
	type kindRow struct {
		drawn, dups, bound, over, maxPer int
	}
	kinds := map[string]*kindRow{}
	var lost, rolled, never, drafts, unknown, order, pending, failed, rows, deliveries, redelivered, failedRuns int
	var failures []string
	for _, r := range s.results {
		took += r.took
		configs[r.s.Config.String()]++
		for k, d := range r.r.Duplicates {
			kr := kinds[k]
			if kr == nil {
				kr = &kindRow{}
				kinds[k] = kr
			}
			kr.drawn += d.Faults
			kr.dups += d.Dups
			kr.bound += d.Bound
			kr.over += len(d.Over)
		}
		lost += len(r.r.Lost)
		rolled += len(r.r.RolledBack)
		never += len(r.r.Never)
		drafts += len(r.r.Drafts)
		unknown += len(r.r.Unknown)
		order += len(r.r.Order)
		pending += len(r.r.Pending)
		failed += len(r.r.Failed)
		rows += r.rows
		deliveries += r.r.Deliveries
		redelivered += r.r.Redelivery
		if !r.ok() {
			failedRuns++
			m := matchIssue(r.s, r.r)
			failures = append(failures, fmt.Sprintf("  seed=%d config=%s: %s%s\n    artifacts: %s\n    replay: %s",
				r.s.Seed, r.s.Config, strings.Join(append(r.r.Problems(), r.errs...), "; "), ifNot(m, "\n    matches: "+m), r.artifacts, r.s.Replay()))
		}
	}
	fmt.Fprintf(&b, "\nchaos summary on %s: %d schedules (%d failed) in %s; %d row versions committed to deliver, %d deliveries (%d consumer redeliveries not counted)\n",
		s.results[0].s.Flavor, len(s.results), failedRuns, took.Round(time.Second), rows, deliveries, redelivered)
	b.WriteString("  configurations:")
	for _, k := range sortedKeys(configs) {
		fmt.Fprintf(&b, " %s %d,", k, configs[k])
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "  %-22s %6s %11s %11s %s\n", "fault", "drawn", "duplicates", "bound (sum)", "over the bound")
	names := make([]string, 0, len(kinds))
	for _, f := range catalogue {
		if _, ok := kinds[f.Name()]; ok {
			names = append(names, f.Name())
		}
	}
	if _, ok := kinds["none"]; ok {
		names = append(names, "none")
	}
	for _, k := range names {
		kr := kinds[k]
		fmt.Fprintf(&b, "  %-22s %6d %11d %11d %d\n", k, kr.drawn, kr.dups, kr.bound, kr.over)
	}
	fmt.Fprintf(&b, "  lost %d, rolled back delivered %d, never-to-deliver delivered %d, drafts %d, unknown ids %d, order per key %d, left pending %d, failed %d\n",
		lost, rolled, never, drafts, unknown, order, pending, failed)
	if len(failures) > 0 {
		sort.Strings(failures)
		b.WriteString("  failed schedules:\n" + strings.Join(failures, "\n") + "\n")
	}
	return b.String()
}

func ifNot(cond, s string) string {
	if cond == "" {
		return ""
	}
	return s
}
