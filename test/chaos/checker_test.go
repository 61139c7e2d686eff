package chaos

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// The checker reads one History and says what the relay owes and did not
// deliver, in the terms of docs/lifecycle.md and docs/ha.md:
//
//   - lost: a committed row version to deliver, never delivered (as
//     committed), and its row not FAILED;
//   - duplicates: deliveries of a row version after its first, each
//     charged to the fault that caused it (blame) and held against that
//     fault's bound (FaultEvent.Bound, from the catalogue);
//   - rolled back delivered, and rows never to deliver (cancelled in their
//     own transaction, another table's) delivered;
//   - drafts: a delivery whose body is no committed version of its row;
//   - order: per key and consumer, first deliveries in commit order;
//   - pending: rows of a status table left PENDING or SENDING after the
//     drain, and rows FAILED that the broker would have taken, or FAILED
//     without a reason.
//
// A consumer's own redeliveries (its connection dropped before the ack)
// are counted apart: they are not the relay's.

// Finding is one thing the checker holds against a run.
type Finding struct {
	ID      string `json:"id"`
	Version int    `json:"v"`
	Key     string `json:"key,omitempty"`
	What    string `json:"what"`
	Fault   string `json:"fault,omitempty"` // the fault blamed, "" when none
}

func (f Finding) String() string {
	s := f.ID
	if f.Version >= 0 {
		s += fmt.Sprintf(" v%d", f.Version)
	}
	if f.Key != "" {
		s += " key " + f.Key
	}
	s += ": " + f.What
	if f.Fault != "" {
		s += " (after " + f.Fault + ")"
	}
	return s
}

// DupCount is the duplicates charged to one kind of fault.
type DupCount struct {
	Faults int // instances in the run
	Dups   int
	Bound  int // the sum of the instances' bounds
	// Over are the instances whose duplicates passed their own bound.
	Over []string
}

// Report is the checker's verdict on one history.
type Report struct {
	Committed  int // row versions committed to deliver
	Deliveries int
	Distinct   int // row versions delivered as committed
	Redelivery int // the consumers' own redeliveries, not counted
	Unresolved int // transactions whose commit outcome stayed unknown
	// ArchivedRetries are failed rows whose retry went with them into an
	// archive the sweeper does not read (documented).
	ArchivedRetries int

	Lost       []Finding
	Duplicates map[string]*DupCount // by fault kind; "none" for duplicates no fault explains
	RolledBack []Finding
	Never      []Finding
	Drafts     []Finding
	Unknown    []Finding // deliveries of ids the writer never wrote
	Order      []Finding
	Pending    []Finding
	Failed     []Finding
	// Dups are the duplicate deliveries, each with the fault charged.
	Dups []Finding
	// Woken are leaders that published after waking from a pause past
	// their lease (docs/ha.md: they publish nothing).
	Woken []Finding
	// OffStream are rows of a stream configuration that never reached the
	// stream, only the queue (the sweeper's AMQP): a stream consumer never
	// sees them. Only a row the stream lane cannot take goes that way, and
	// the harness writes none.
	OffStream []Finding
}

// OK is true when nothing is held against the run.
func (r *Report) OK() bool { return len(r.Problems()) == 0 }

// Problems lists what is held against the run, one line per kind.
func (r *Report) Problems() []string {
	var out []string
	add := func(what string, fs []Finding) {
		if len(fs) == 0 {
			return
		}
		ex := make([]string, 0, 3)
		for _, f := range fs[:min(len(fs), 3)] {
			ex = append(ex, f.String())
		}
		out = append(out, fmt.Sprintf("%s: %d (%s)", what, len(fs), strings.Join(ex, "; ")))
	}
	add("lost", r.Lost)
	add("rolled back delivered", r.RolledBack)
	add("never to deliver, delivered", r.Never)
	add("drafts", r.Drafts)
	add("unknown ids delivered", r.Unknown)
	add("order per key", r.Order)
	add("left pending", r.Pending)
	add("failed", r.Failed)
	add("a leader deposed while paused published after it woke", r.Woken)
	add("not into the stream (sent by the sweeper over AMQP only)", r.OffStream)
	for _, k := range sortedKeys(r.Duplicates) {
		d := r.Duplicates[k]
		if len(d.Over) > 0 {
			out = append(out, fmt.Sprintf("duplicates after %s: %d, over the bound in %s", k, d.Dups, strings.Join(d.Over, ", ")))
		}
	}
	return out
}

// TotalDuplicates is the sum over fault kinds.
func (r *Report) TotalDuplicates() int {
	n := 0
	for _, d := range r.Duplicates {
		n += d.Dups
	}
	return n
}

// blameSlack is how far before a row's first delivery a fault may have
// begun and still be the cause of what came after: a message the broker
// took just before its connection was reset is delivered after the reset
// began.
const blameSlack = time.Second

// blame is the fault that explains a replay or a republish seen at `seen`
// of a row version first delivered at `from`: the last fault begun before
// seen that was still in effect at from (less blameSlack) or began after
// it. A fault is in effect from its start until ends[i]: its recovery, or
// later, once every row committed during it was delivered (a relay paused
// for a minute sends its backlog after SIGCONT). -1: none.
func blame(faults []FaultEvent, ends []time.Time, from, seen time.Time) int {
	best := -1
	for i, f := range faults {
		if f.Start.After(seen) || ends[i].Before(from.Add(-blameSlack)) {
			continue
		}
		if best < 0 || f.Start.After(faults[best].Start) {
			best = i
		}
	}
	return best
}

// blameCommit is the fault that left behind a row version committed at
// `at`, for what is seen of it at `seen`: lost, left pending, or sent again
// by the sweeper a grace period later. The fault going on at its commit,
// or else the first one after it: what came later had nothing of it left
// to lose. -1: none.
func blameCommit(faults []FaultEvent, at, seen time.Time) int {
	best := -1
	for i, f := range faults {
		if !f.Start.After(at) && !f.End.Before(at) {
			return i
		}
		if f.Start.After(at) && !f.Start.After(seen) && (best < 0 || f.Start.Before(faults[best].Start)) {
			best = i
		}
	}
	return best
}

// sweptAfter tells the sweeper's duplicates from the others: it takes a
// row only once it is older than its grace period (60 s, the relays'), so
// a second delivery this long after the commit is its.
const sweptAfter = 50 * time.Second

// catchUpFrom is how long before a fault the rows whose delivery it may
// delay were committed: the relay's backlog when it struck.
const catchUpFrom = 10 * time.Second

type version struct {
	id string
	v  int
}

// Check reads a history whose unknown outcomes were resolved.
func Check(h *History) *Report {
	r := &Report{Duplicates: map[string]*DupCount{}}
	faultName := func(i int) string {
		if i < 0 {
			return ""
		}
		f := h.Faults[i]
		return fmt.Sprintf("%s at %.1fs", f.Kind, f.Start.Sub(h.Start).Seconds())
	}
	for _, f := range h.Faults {
		d := r.Duplicates[f.Kind]
		if d == nil {
			d = &DupCount{}
			r.Duplicates[f.Kind] = d
		}
		d.Faults++
		d.Bound += f.Bound
	}

	// What the writer committed, by id and version.
	type want struct {
		row    Row
		seq    int
		at     time.Time
		normal string
	}
	versions := map[string]map[int]*want{}
	rolledBack := map[string]bool{}
	committedIDs := map[string]bool{}
	for _, tx := range h.Txs {
		switch tx.Outcome {
		case Unknown:
			r.Unresolved++
			for _, row := range tx.Rows {
				committedIDs[row.ID] = true // neither lost nor rolled back: not judged
			}
			continue
		case RolledBack:
			for _, row := range tx.Rows {
				rolledBack[row.ID] = true
			}
			continue
		}
		for _, row := range tx.Rows {
			committedIDs[row.ID] = true
			if versions[row.ID] == nil {
				versions[row.ID] = map[int]*want{}
			}
			versions[row.ID][row.Version] = &want{row: row, seq: tx.Seq, at: tx.At, normal: normalize(row.Body)}
			if row.Expect == Deliver {
				r.Committed++
			}
		}
	}

	// Deliveries, each placed on the version its body is.
	deliveries := sortedDeliveries(h.Deliveries)
	r.Deliveries = len(deliveries)
	got := map[version][]Delivery{}
	seenMsg := map[string]bool{} // by source and id: a redelivery of something not seen is a first delivery
	for _, d := range deliveries {
		if d.Redelivered && seenMsg[d.Src+"\x00"+d.ID+"\x00"+d.Body] {
			r.Redelivery++
			continue
		}
		seenMsg[d.Src+"\x00"+d.ID+"\x00"+d.Body] = true
		vs, ok := versions[d.ID]
		if !ok {
			switch {
			case rolledBack[d.ID] && !committedIDs[d.ID]:
				r.RolledBack = append(r.RolledBack, Finding{ID: d.ID, What: "its transaction rolled back; delivered by " + d.Src})
			case !committedIDs[d.ID]:
				r.Unknown = append(r.Unknown, Finding{ID: d.ID, What: "never written; delivered by " + d.Src})
			}
			continue
		}
		n := normalize(d.Body)
		placed := false
		for v, w := range vs {
			if w.normal == n {
				got[version{d.ID, v}] = append(got[version{d.ID, v}], d)
				placed = true
				break
			}
		}
		if !placed {
			r.Drafts = append(r.Drafts, Finding{ID: d.ID, What: fmt.Sprintf("delivered by %s as %.80q, which no transaction committed", d.Src, d.Body)})
		}
	}

	// How long each fault was in effect: until its recovery, or until the
	// rows committed during it (and in the seconds before) were all
	// delivered, whichever is later.
	ends := make([]time.Time, len(h.Faults))
	for i, f := range h.Faults {
		ends[i] = f.End
	}
	for ver, ds := range got {
		w := versions[ver.id][ver.v]
		first := ds[firstDelivery(ds)].At
		for i, f := range h.Faults {
			if w.at.Before(f.End) && w.at.After(f.Start.Add(-catchUpFrom)) && first.After(ends[i]) {
				ends[i] = first
			}
		}
	}
	horizon := h.Start.Add(100 * time.Hour)

	// Per version: delivered once as committed, or FAILED; duplicates blamed.
	charged := map[int]int{} // duplicates by fault (-1: none)
	ids := make([]string, 0, len(versions))
	for id := range versions {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		for v, w := range versions[id] {
			ds := got[version{id, v}]
			end, inEnd := h.End[id]
			switch w.row.Expect {
			case Never:
				if len(ds) > 0 {
					r.Never = append(r.Never, Finding{ID: id, Version: v, Key: w.row.Key,
						What: fmt.Sprintf("not publishable at its commit (%s); delivered %d times", w.row.Body, len(ds))})
				}
				continue
			case Later:
				continue
			case Fail:
				if len(ds) > 0 {
					r.Never = append(r.Never, Finding{ID: id, Version: v, Key: w.row.Key, What: "routed to an exchange that does not exist; delivered"})
				}
				continue
			}
			if len(ds) == 0 {
				if inEnd && end.Status == "FAILED" {
					continue // judged below
				}
				what := "committed, never delivered"
				if inEnd {
					what += fmt.Sprintf(", %s in %s", end.Status, end.Table)
				}
				r.Lost = append(r.Lost, Finding{ID: id, Version: v, Key: w.row.Key, What: what,
					Fault: faultName(blameCommit(h.Faults, w.at, horizon))})
				continue
			}
			r.Distinct++
			if h.Schedule.Config.Stream && !slices.ContainsFunc(ds, func(d Delivery) bool { return d.Src == "stream" }) {
				r.OffStream = append(r.OffStream, Finding{ID: id, Version: v, Key: w.row.Key,
					What:  fmt.Sprintf("delivered %d times, only by the queue (first at %.1fs)", len(ds), ds[firstDelivery(ds)].At.Sub(h.Start).Seconds()),
					Fault: faultName(blameCommit(h.Faults, w.at, horizon))})
			}
			first := firstDelivery(ds)
			for j, d := range ds {
				if j == first {
					continue
				}
				i := blame(h.Faults, ends, ds[first].At, d.At)
				if d.At.Sub(w.at) >= sweptAfter {
					i = blameCommit(h.Faults, w.at, d.At)
				}
				kind := "none"
				if i >= 0 {
					kind = h.Faults[i].Kind
				}
				r.Dups = append(r.Dups, Finding{ID: id, Version: v, Key: w.row.Key, Fault: faultName(i),
					What: fmt.Sprintf("delivered again by %s at %.1fs (first by %s at %.1fs)", d.Src, d.At.Sub(h.Start).Seconds(),
						ds[first].Src, ds[first].At.Sub(h.Start).Seconds())})
				dc := r.Duplicates[kind]
				if dc == nil {
					dc = &DupCount{}
					r.Duplicates[kind] = dc
				}
				dc.Dups++
				charged[i]++
			}
		}
	}
	for i, n := range charged {
		kind := "none"
		bound := 0
		if i >= 0 {
			kind, bound = h.Faults[i].Kind, h.Faults[i].Bound
		}
		if n > bound {
			d := r.Duplicates[kind]
			name := faultName(i)
			if i < 0 {
				name = "no fault"
			}
			d.Over = append(d.Over, fmt.Sprintf("%s: %d > %d", name, n, bound))
			sort.Strings(d.Over)
		}
	}

	// Order: per consumer and key, first deliveries in commit order.
	type firstOf struct {
		d   Delivery
		seq int
		key string
		at  time.Time
		ver version
	}
	var firsts []firstOf
	for ver, ds := range got {
		first := ds[firstDelivery(ds)]
		w := versions[ver.id][ver.v]
		if w.row.Expect != Deliver {
			continue
		}
		firsts = append(firsts, firstOf{d: first, seq: w.seq, key: w.row.Key, at: w.at, ver: ver})
	}
	sort.Slice(firsts, func(i, j int) bool {
		if firsts[i].d.Src != firsts[j].d.Src {
			return firsts[i].d.Src < firsts[j].d.Src
		}
		return firsts[i].d.N < firsts[j].d.N
	})
	maxSeq := map[string]int{}
	for _, f := range firsts {
		g := f.d.Src + "\x00" + f.key
		if m, ok := maxSeq[g]; ok && f.seq < m {
			r.Order = append(r.Order, Finding{ID: f.ver.id, Version: f.ver.v, Key: f.key,
				What:  fmt.Sprintf("committed in transaction %d, first delivered by %s after a row of transaction %d", f.seq, f.d.Src, m),
				Fault: faultName(blame(h.Faults, ends, f.at, f.d.At))})
			continue
		}
		maxSeq[g] = max(maxSeq[g], f.seq)
	}

	// End state of status tables.
	live := h.Table
	for _, id := range ids {
		end, ok := h.End[id]
		if !ok {
			continue
		}
		last := -1
		for v := range versions[id] {
			last = max(last, v)
		}
		w := versions[id][last]
		switch end.Status {
		case "PENDING", "SENDING":
			if w.row.Expect == Fail && end.Error != "" && end.Table != live && !slices.Contains(h.Tenants, end.Table) {
				// Its failure recorded where it now lives, an archive the
				// sweeper does not read: documented (docs/lifecycle.md,
				// "Retries of rows archived away are not swept").
				r.ArchivedRetries++
				continue
			}
			if w.row.Expect != Never && w.row.Expect != Later {
				what := fmt.Sprintf("%s in %s after the drain (%d deliveries)", end.Status, end.Table, len(got[version{id, last}]))
				if end.Error == "" && w.row.Expect == Fail {
					what += ", its failure recorded nowhere"
				}
				r.Pending = append(r.Pending, Finding{ID: id, Version: last, Key: w.row.Key, What: what,
					Fault: faultName(blameCommit(h.Faults, w.at, horizon))})
			}
		case "FAILED":
			switch {
			case w.row.Expect == Deliver:
				r.Failed = append(r.Failed, Finding{ID: id, Version: last, Key: w.row.Key,
					What: fmt.Sprintf("FAILED in %s, but its route exists (%q)", end.Table, end.Error)})
			case end.Error == "":
				r.Failed = append(r.Failed, Finding{ID: id, Version: last, Key: w.row.Key, What: "FAILED without a reason in " + end.Table})
			}
		}
	}
	for _, w := range h.Woken {
		if w.Publishes > 0 {
			r.Woken = append(r.Woken, Finding{ID: fmt.Sprintf("relay %d", w.Relay), Version: -1,
				What: fmt.Sprintf("%d basic.publish in the %.1fs after SIGCONT at %.1fs, another relay leading", w.Publishes, w.Until.Sub(w.At).Seconds(), w.At.Sub(h.Start).Seconds())})
		}
	}
	for _, fs := range [][]Finding{r.Lost, r.Drafts, r.Unknown, r.RolledBack, r.Never, r.Pending, r.Failed, r.Dups, r.OffStream} {
		sort.Slice(fs, func(i, j int) bool { return fs[i].ID < fs[j].ID })
	}
	return r
}

// firstDelivery is the index of the earliest of ds.
func firstDelivery(ds []Delivery) int {
	first := 0
	for i, d := range ds {
		if d.At.Before(ds[first].At) {
			first = i
		}
	}
	return first
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
