package discover

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// The words status values are written with, by the state they mean
// (compared in upper case, without _ - and spaces). The Chinese ones are
// the seed designs' column comments ('0-待发送 1-已发送 2-发送失败').
var stateWords = map[string][]string{
	"pending": {"PENDING", "NEW", "READY", "CREATED", "INIT", "INITIAL", "WAITING", "WAIT", "UNSENT", "NOTSENT",
		"TODO", "QUEUED", "UNPUBLISHED", "NOTPUBLISHED", "SCHEDULED", "待发送", "未发送", "待处理", "待投递", "初始"},
	"sending": {"SENDING", "PROCESSING", "INPROGRESS", "PUBLISHING", "INFLIGHT", "DELIVERING", "发送中", "处理中", "投递中"},
	"sent": {"SENT", "DONE", "PUBLISHED", "SUCCESS", "SUCCEEDED", "SUCCESSFUL", "COMPLETED", "COMPLETE", "DELIVERED",
		"PROCESSED", "OK", "FINISHED", "ACKED", "已发送", "发送成功", "成功", "已投递", "已完成"},
	"failed": {"FAILED", "FAIL", "FAILURE", "ERROR", "ERRORED", "DEAD", "DEADLETTER", "ABANDONED", "REJECTED",
		"失败", "发送失败", "投递失败"},
}

// states in the order their values are chosen and written.
var states = []string{"pending", "sending", "sent", "failed"}

// stateOf is the state a status value means, or "".
func stateOf(v string) string {
	w := strings.ToUpper(strings.NewReplacer("_", "", "-", "", " ", "").Replace(v))
	for _, s := range states {
		if slices.Contains(stateWords[s], w) {
			return s
		}
	}
	return ""
}

// numberLabel finds "0-pending", "1: sent", "2=failed", "0 待发送" in a
// column comment: a number and the word after it.
var numberLabel = regexp.MustCompile(`(-?\d+)\s*[-:=：.、)）]?\s*([^\s\d,;/|，；、:：=()（）]+)`)

// statusGuess is what statusValues decided about a status column.
type statusGuess struct {
	statuses outbox.Statuses
	// why says where each state's value came from, by state.
	why map[string]string
	// notes are what it could not decide.
	notes []Note
}

// statusValues decides which of the status column's values mean pending,
// sending, sent and failed: from an ENUM's list, the column's comment,
// its default and the values present, by the words they are written with;
// failing that, by the usual convention, said to be a guess.
func statusValues(c Column, present []string) statusGuess {
	if c.integer() {
		return numericStatuses(c, present)
	}
	g := statusGuess{why: map[string]string{}}
	var domain []string
	source := map[string]string{}
	add := func(v, from string) {
		if !usable(v) {
			// outbox.Table.Validate refuses it: it could break out of the
			// SQL literal the relay writes it as.
			g.notes = append(g.notes, Note{Key: "statuses", Text: fmt.Sprintf("the value %q of column %q holds a quote, a backslash or a control character, which the relay does not write into SQL: a row inserted with it is not published", v, c.Name)})
			return
		}
		if v != "" && !slices.Contains(domain, v) {
			domain = append(domain, v)
			source[v] = from
		}
	}
	for _, v := range c.enumValues() {
		add(v, "ENUM value")
	}
	if c.DataType != "enum" {
		if c.Default != nil {
			add(*c.Default, "the column's DEFAULT")
		}
		for _, v := range present {
			add(v, "present in the table")
		}
		for _, w := range regexp.MustCompile(`[A-Za-z_]+|\p{Han}+`).FindAllString(c.Comment, -1) {
			if stateOf(w) != "" {
				add(w, "the column's comment")
			}
		}
	}
	chosen := map[string]string{}
	for _, v := range domain {
		if s := stateOf(v); s != "" && chosen[s] == "" {
			chosen[s] = v
			g.why[s] = source[v]
		}
	}
	// The default is what an insert that says nothing gets: pending,
	// unless its word says otherwise.
	if d := c.Default; d != nil && slices.Contains(domain, *d) && stateOf(*d) == "" && chosen["pending"] == "" {
		chosen["pending"], g.why["pending"] = *d, "the column's DEFAULT"
	}
	for _, s := range []string{"pending", "sent"} {
		if chosen[s] == "" {
			guess := strings.ToUpper(s)
			if len(domain) > 0 && strings.ToLower(domain[0]) == domain[0] {
				guess = s
			}
			chosen[s], g.why[s] = guess, "a guess"
			if c.DataType == "enum" {
				// The relay's write of a value the ENUM lacks fails: no
				// guess is right, the table or the mapping must change.
				g.notes = append(g.notes, Note{Key: "statuses." + s, Text: fmt.Sprintf(
					"the ENUM of column %q has no value that reads as %s (%s): wrote %q, which the column cannot take; add a value to the ENUM, or set statuses.%s to one of its values",
					c.Name, s, describeDomain(domain), guess, s)})
				continue
			}
			g.notes = append(g.notes, Note{Key: "statuses." + s, Text: fmt.Sprintf("no value of column %q reads as %s (%s): wrote %q, set the value your application writes",
				c.Name, s, describeDomain(domain), guess)})
		}
	}
	// A string column takes any value: a FAILED the application never
	// writes costs nothing and lets a failure be recorded. An ENUM takes
	// only its list.
	if chosen["failed"] == "" && c.DataType != "enum" {
		guess := "FAILED"
		if strings.ToLower(chosen["pending"]) == chosen["pending"] {
			guess = "failed"
		}
		chosen["failed"], g.why["failed"] = guess, "a guess"
		g.notes = append(g.notes, Note{Key: "statuses.failed", Text: fmt.Sprintf("no value of column %q reads as failed (%s): wrote %q, which a row gets after its last failed attempt; set yours, or remove it to leave such rows pending",
			c.Name, describeDomain(domain), guess)})
	}
	for _, v := range domain {
		if !slices.Contains([]string{chosen["pending"], chosen["sending"], chosen["sent"], chosen["failed"]}, v) {
			g.notes = append(g.notes, Note{Key: "statuses", Text: fmt.Sprintf("the value %q of column %q means none of pending, sending, sent or failed to init: a row inserted with it is not published", v, c.Name)})
		}
	}
	g.statuses = outbox.Statuses{Pending: chosen["pending"], Sending: chosen["sending"], Sent: chosen["sent"],
		Failed: chosen["failed"], Publishable: []string{chosen["pending"]}}
	return g
}

// numericStatuses decides the values of an integer status: from the
// comment's labels ("0-pending 1-sent 2-failed"), else by the column's
// name (published, is_sent: 0 and 1), else by the usual 0 pending, 1 sent,
// 2 failed, said to be a guess.
func numericStatuses(c Column, present []string) statusGuess {
	g := statusGuess{why: map[string]string{}}
	chosen := map[string]string{}
	for _, m := range numberLabel.FindAllStringSubmatch(c.Comment, -1) {
		if s := stateOf(m[2]); s != "" && chosen[s] == "" {
			chosen[s], g.why[s] = m[1], "the column's comment"
		}
	}
	switch {
	case chosen["sent"] != "" && chosen["pending"] != "":
	case len(chosen) == 0 && slices.Contains([]string{"published", "ispublished", "sent", "issent", "delivered", "isdelivered", "processed"}, normal(c.Name)):
		// A yes/no column: 1 once done.
		chosen["pending"], chosen["sent"] = "0", "1"
		g.why["pending"], g.why["sent"] = "0: not yet "+strings.TrimPrefix(normal(c.Name), "is"), "1: "+strings.TrimPrefix(normal(c.Name), "is")
	default:
		conv := map[string]string{"pending": "0", "sent": "1", "failed": "2"}
		// The default is what an insert that says nothing gets; one that
		// is not a number (the server would refuse it) says nothing.
		hasDefault := false
		if d := c.Default; d != nil && chosen["pending"] == "" && !slices.Contains([]string{"1", "2"}, *d) {
			if _, err := strconv.Atoi(*d); err == nil {
				conv["pending"], hasDefault = *d, true
			}
		}
		var guessed []string
		for _, s := range []string{"pending", "sent", "failed"} {
			if chosen[s] != "" || slices.Contains(chosen2values(chosen), conv[s]) {
				continue
			}
			chosen[s], g.why[s] = conv[s], "a guess"
			if s == "pending" && hasDefault {
				g.why[s] = "the column's DEFAULT"
				continue
			}
			guessed = append(guessed, fmt.Sprintf("%s %s", conv[s], s))
		}
		if len(guessed) > 0 {
			g.notes = append(g.notes, Note{Key: "statuses", Text: fmt.Sprintf("column %q is a number and its comment does not say what each value means: wrote %s (the usual convention); set the values your application writes",
				c.Name, strings.Join(guessed, ", "))})
		}
	}
	for _, v := range present {
		if !slices.Contains(chosen2values(chosen), v) {
			g.notes = append(g.notes, Note{Key: "statuses", Text: fmt.Sprintf("the value %s of column %q means none of pending, sending, sent or failed to init: a row inserted with it is not published", v, c.Name)})
		}
	}
	g.statuses = outbox.Statuses{Pending: chosen["pending"], Sending: chosen["sending"], Sent: chosen["sent"],
		Failed: chosen["failed"], Publishable: []string{chosen["pending"]}, Numeric: true}
	return g
}

// usable reports a status value the relay can write: no quotes,
// backslashes or control characters (outbox.Table.Validate's rule).
func usable(v string) bool {
	return !strings.ContainsFunc(v, func(r rune) bool { return r == '\'' || r == '"' || r == '\\' || r < 0x20 || r == 0x7f })
}

func chosen2values(chosen map[string]string) []string {
	var out []string
	for _, s := range states {
		if v := chosen[s]; v != "" {
			out = append(out, v)
		}
	}
	return out
}

// describeDomain names the values init saw, for a note.
func describeDomain(domain []string) string {
	if len(domain) == 0 {
		return "the table has no rows and the column no ENUM list, DEFAULT or comment to read them from"
	}
	var q []string
	for _, v := range domain {
		q = append(q, strconv.Quote(v))
	}
	return "values seen: " + strings.Join(q, ", ")
}
