package discover

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// Server is a MySQL connection as the config writes it. A password is
// never written: PasswordVar names the environment variable the config
// reads it from.
type Server struct {
	Host        string
	Port        int
	User        string
	PasswordVar string // "" when the server is reached without one
	TLS         bool
}

// Settings are the parts of the config that are not the tables.
type Settings struct {
	Name    string
	Source  Server
	Primary Server
	// BrokerURL is the broker's URL with ${VAR} in place of its password;
	// empty when --broker was not given (a placeholder is written).
	BrokerURL string
	// RedisAddr is host:port; empty when --redis was not given (the
	// relay's default is written).
	RedisAddr string
	// Notes are about the settings (what was not given).
	Notes []Note
	// File is where the config is written, for the next steps the header
	// gives ("" for stdout).
	File string
}

// variables are the environment variables the settings read, in order.
func (s Settings) variables() []string {
	var out []string
	for _, v := range []string{s.Source.PasswordVar, s.Primary.PasswordVar} {
		if v != "" && !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	if strings.Contains(s.BrokerURL, "${RELAY_BROKER_PASSWORD}") || s.BrokerURL == "" {
		out = append(out, "RELAY_BROKER_PASSWORD")
	}
	return out
}

// commentColumn is where comments after a value start.
const commentColumn = 36

// Render writes the config for the proposals, commented: what each choice
// rests on, and what could not be decided.
func Render(w io.Writer, s Settings, tables []*Table, proposals []*Proposal) error {
	r := &writer{}
	var names []string
	for _, t := range tables {
		names = append(names, t.Schema+"."+t.Name)
	}
	r.comment(0, "binlog-relay config for "+strings.Join(names, ", ")+", written by `binlog-relay init` from the tables on the source "+
		fmt.Sprintf("%s:%d", s.Source.Host, s.Source.Port)+serverVersion(tables)+".")
	file := cmp.Or(s.File, "FILE")
	next := "Next: "
	if vars := s.variables(); len(vars) > 0 {
		next += "set " + strings.Join(vars, " and ") + " (passwords are never written here), then "
	}
	r.comment(0, next+"`binlog-relay check --config "+file+"` (the servers, grants and tables), "+
		"then `binlog-relay run --config "+file+"`. Every key: docs/configuration.md.")
	r.notes(0, s.Notes)
	r.kv(0, "name", s.Name, "relays of one name share a checkpoint: binlog-relay:"+s.Name+":checkpoint in Redis")
	r.server("source", s.Source, "the replica whose binlog is read: REPLICATION SLAVE, REPLICATION CLIENT, SELECT")
	r.server("primary", s.Primary, "where rows are marked sent: SELECT, UPDATE on the outbox tables")
	r.line(0, "broker:", "")
	if s.BrokerURL != "" {
		r.kv(2, "url", s.BrokerURL, "")
	} else {
		r.kv(2, "url", "amqp://relay:${RELAY_BROKER_PASSWORD}@127.0.0.1:5672/", "--broker was not given: your RabbitMQ")
	}
	r.line(0, "redis:", "the checkpoint, the leader lease and the heartbeat")
	if s.RedisAddr != "" {
		r.kv(2, "addr", s.RedisAddr, "")
	} else {
		r.kv(2, "addr", "127.0.0.1:6379", "--redis was not given: the default")
	}
	r.line(0, "tables:", "")
	for i, p := range proposals {
		r.table(tables[i], p)
	}
	_, err := io.WriteString(w, r.b.String())
	return err
}

func serverVersion(tables []*Table) string {
	if len(tables) == 0 || tables[0].Server == "" {
		return ""
	}
	return " (" + tables[0].Server + ")"
}

// writer builds the YAML line by line, comments aligned.
type writer struct{ b strings.Builder }

func (r *writer) line(indent int, text, comment string) {
	l := strings.Repeat(" ", indent) + text
	if comment != "" {
		if pad := commentColumn - len(l); pad > 0 {
			l += strings.Repeat(" ", pad)
		} else {
			l += " "
		}
		l += "# " + comment
	}
	r.b.WriteString(l + "\n")
}

// kv writes key: value with the value quoted as YAML needs.
func (r *writer) kv(indent int, key, value, comment string) {
	r.line(indent, key+": "+scalar(value), comment)
}

// comment writes text as comment lines, wrapped.
func (r *writer) comment(indent int, text string) {
	for _, l := range wrap(text, 100-indent-2) {
		r.b.WriteString(strings.Repeat(" ", indent) + "# " + l + "\n")
	}
}

// notes writes what could not be decided.
func (r *writer) notes(indent int, notes []Note) {
	if len(notes) == 0 {
		return
	}
	r.comment(indent, "init could not decide these: check each, then delete this comment")
	for _, n := range notes {
		lines := wrap(n.String(), 100-indent-6)
		for i, l := range lines {
			prefix := "#   "
			if i == 0 {
				prefix = "# - "
			}
			r.b.WriteString(strings.Repeat(" ", indent) + prefix + l + "\n")
		}
	}
}

func (r *writer) server(key string, s Server, comment string) {
	r.line(0, key+":", comment)
	r.kv(2, "host", s.Host, "")
	r.line(2, fmt.Sprintf("port: %d", s.Port), "")
	r.kv(2, "user", s.User, "")
	if s.PasswordVar != "" {
		r.kv(2, "password", "${"+s.PasswordVar+"}", "set "+s.PasswordVar+" where the relay runs; or password_file")
	}
	if s.TLS {
		r.line(2, "tls: {enabled: true}", "the DSN asked for TLS: add ca_file for a private CA")
	}
}

// table writes one tables: entry.
func (r *writer) table(t *Table, p *Proposal) {
	tb := p.Table
	if w := p.Why[""]; w != "" {
		r.comment(2, w)
	}
	for _, rm := range p.Remarks {
		r.comment(2, rm)
	}
	r.notes(2, p.Notes)
	if p.Preset != "" {
		r.kv(2, "- preset", p.Preset, "")
		r.kv(4, "schema", tb.Schema, "")
		def, _ := outbox.Preset(p.Preset)
		if !strings.EqualFold(def.Name, tb.Name) {
			r.kv(4, "name", tb.Name, "")
		} else {
			r.comment(4, "name: "+tb.Name+" (the preset's)")
		}
		r.comment(4, "what the preset reads: "+summary(tb))
		if len(p.Cleared) > 0 || p.HeadersChanged {
			r.line(4, "columns:", "")
			for _, f := range p.Cleared {
				r.kv(6, f, "", "the table has no such column")
			}
			if p.HeadersChanged {
				r.line(6, "headers: "+flowList(tb.Columns.Headers), "the preset's header columns the table has")
			}
		}
		r.trace(tb, p)
		return
	}
	r.kv(2, "- schema", tb.Schema, "")
	r.kv(4, "name", tb.Name, "")
	r.line(4, "columns:", "")
	c := tb.Columns
	for _, f := range []struct{ key, v string }{{"id", c.ID}, {"message_id", c.MessageID}, {"exchange", c.Exchange},
		{"routing_key", c.RoutingKey}, {"payload", c.Payload}, {"status", c.Status}, {"retry_count", c.RetryCount},
		{"max_retry_count", c.MaxRetryCount}, {"next_retry_time", c.NextRetryTime}, {"error", c.Error},
		{"created_at", c.CreatedAt}, {"updated_at", c.UpdatedAt}, {"version", c.Version}} {
		why := p.Why["columns."+f.key]
		switch {
		case f.v != "":
			r.kv(6, f.key, f.v, why)
		case why != "":
			r.comment(6, f.key+": "+why)
		}
	}
	if len(c.Headers) > 0 {
		r.line(6, "headers: "+flowList(c.Headers), p.Why["columns.headers"])
	}
	if c.Status != "" {
		s := tb.Statuses
		r.line(4, "statuses:", "")
		for _, f := range []struct{ key, v string }{{"pending", s.Pending}, {"sending", s.Sending}, {"sent", s.Sent}, {"failed", s.Failed}} {
			if f.v != "" {
				r.kv(6, f.key, f.v, p.Why["statuses."+f.key])
			}
		}
		r.line(6, "publishable: "+flowList(s.Publishable), p.Why["statuses.publishable"])
		if s.Numeric {
			r.line(6, "numeric: true", "an integer column: values compared and written as numbers")
		}
	}
	rt := tb.Route
	if rt.Exchange != "" || rt.ContentType != "" || rt.ExpandHeaders {
		r.line(4, "route:", "")
		if rt.Exchange != "" {
			r.kv(6, "exchange", rt.Exchange, "a fixed exchange, or a template over columns: \"{kind}\"")
		}
		if rt.ContentType != "" {
			r.kv(6, "content_type", rt.ContentType, p.Why["route.content_type"])
		}
		if rt.ExpandHeaders {
			r.line(6, "expand_headers: true", p.Why["route.expand_headers"])
		}
	}
	if tb.MaxRetries > 0 {
		r.line(4, fmt.Sprintf("max_retries: %d", tb.MaxRetries), p.Why["max_retries"])
	}
	if tb.CreatedAtEpoch != "" {
		r.kv(4, "created_at_epoch", tb.CreatedAtEpoch, p.Why["created_at_epoch"])
	}
	r.trace(tb, p)
}

func (r *writer) trace(tb outbox.Table, p *Proposal) {
	if tb.Trace.Format == "" {
		return
	}
	body := "format: " + tb.Trace.Format
	if tb.Trace.TracestateColumn != "" {
		body += ", tracestate_column: " + scalar(tb.Trace.TracestateColumn)
	}
	r.line(4, "trace: {"+body+"}", p.Why["trace"])
}

// summary says in one line what a preset maps, for the reader to compare
// with the table.
func summary(t outbox.Table) string {
	c := t.Columns
	ex, rk := t.RouteTemplates()
	parts := []string{"id " + c.ID}
	if c.MessageID != "" {
		parts = append(parts, "message id "+c.MessageID)
	}
	parts = append(parts, "exchange "+ex)
	if rk != "" {
		parts = append(parts, "routing key "+rk)
	}
	parts = append(parts, "payload "+c.Payload)
	if c.Status != "" {
		s := t.Statuses
		st := fmt.Sprintf("status %s (publishes %s, sent %s", c.Status, strings.Join(s.Publishable, "/"), s.Sent)
		if s.Failed != "" {
			st += ", failed " + s.Failed
		}
		parts = append(parts, st+")")
	}
	if len(c.Headers) > 0 {
		parts = append(parts, "headers "+strings.Join(c.Headers, ", "))
	}
	return strings.Join(parts, "; ")
}

// scalar renders a string as a YAML scalar: bare when YAML reads it back
// as that string, quoted otherwise ("0", "", "yes").
func scalar(s string) string {
	b, err := yaml.Marshal(s)
	if err != nil {
		return fmt.Sprintf("%q", s)
	}
	return strings.TrimSuffix(string(b), "\n")
}

func flowList(vals []string) string {
	q := make([]string, len(vals))
	for i, v := range vals {
		q[i] = scalar(v)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// wrap cuts text into lines of at most width, at spaces.
func wrap(text string, width int) []string {
	var out []string
	line := ""
	for _, w := range strings.Fields(text) {
		if line != "" && len(line)+1+len(w) > width {
			out = append(out, line)
			line = w
			continue
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	if line != "" {
		out = append(out, line)
	}
	return out
}
