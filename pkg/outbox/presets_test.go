package outbox

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// presetDDL is the schema/ file each preset is checked against.
var presetDDL = map[string]string{
	"producer-message": "producer_message.sql",
	"local-message":    "local_message.sql",
	"message-record":   "message_record.sql",
	"debezium":         "debezium_outbox.sql",
	"eventuate":        "eventuate_message.sql",
}

var (
	createRe = regexp.MustCompile("(?i)CREATE TABLE (?:IF NOT EXISTS )?`?([A-Za-z0-9_$]+)`?")
	columnRe = regexp.MustCompile("^\\s+`?([A-Za-z0-9_$]+)`?\\s+([A-Za-z]+)")
)

// parseDDL reads a CREATE TABLE file: the table name and each column's type.
func parseDDL(t *testing.T, file string) (string, map[string]string) {
	t.Helper()
	b, err := os.ReadFile("../../schema/" + file)
	if err != nil {
		t.Fatal(err)
	}
	m := createRe.FindSubmatch(b)
	if m == nil {
		t.Fatalf("%s: no CREATE TABLE", file)
	}
	cols := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "--") {
			continue
		}
		c := columnRe.FindStringSubmatch(line)
		if c == nil {
			continue
		}
		switch strings.ToUpper(c[1]) {
		case "PRIMARY", "UNIQUE", "KEY", "INDEX", "CONSTRAINT":
			continue
		}
		cols[c[1]] = strings.ToUpper(c[2])
	}
	return string(m[1]), cols
}

// Every preset maps only columns its DDL has, with the types its statuses
// and created-time storage assume.
func TestPresetsMatchTheirDDL(t *testing.T) {
	if len(presetDDL) != len(presets) {
		t.Fatalf("presets %v, DDL files for %d", PresetNames(), len(presetDDL))
	}
	for name, file := range presetDDL {
		t.Run(name, func(t *testing.T) {
			p, err := Preset(name)
			if err != nil {
				t.Fatal(err)
			}
			p.Schema = "app"
			if err := p.Validate("tables[0]"); err != nil {
				t.Fatalf("preset does not validate: %v", err)
			}
			table, cols := parseDDL(t, file)
			if table != p.Name {
				t.Fatalf("DDL creates %s, preset names %s", table, p.Name)
			}
			for field, col := range p.MappedColumns() {
				if _, ok := cols[col]; !ok {
					t.Errorf("%s maps %q, which %s does not have (it has %v)", field, col, file, cols)
				}
			}
			if p.Columns.Status != "" {
				typ := cols[p.Columns.Status]
				numeric := strings.Contains(typ, "INT")
				if numeric != p.Statuses.Numeric {
					t.Errorf("status column %s is %s but statuses.numeric is %v", p.Columns.Status, typ, p.Statuses.Numeric)
				}
			}
			if c := p.Columns.CreatedAt; c != "" {
				epoch := strings.Contains(cols[c], "INT")
				if epoch != (p.CreatedAtEpoch != "") {
					t.Errorf("created column %s is %s but created_at_epoch is %q", c, cols[c], p.CreatedAtEpoch)
				}
			}
		})
	}
}

// Preset returns a copy: changing it leaves the preset alone.
func TestPresetIsACopy(t *testing.T) {
	p, err := Preset("local-message")
	if err != nil {
		t.Fatal(err)
	}
	p.Columns.Headers[0] = "changed"
	p.Statuses.Publishable[0] = "9"
	p.Columns.Payload = "other"
	q, _ := Preset("local-message")
	if q.Columns.Headers[0] != "biz_id" || q.Statuses.Publishable[0] != "0" || q.Columns.Payload != "message_body" {
		t.Fatalf("the preset was changed through a copy: %+v", q)
	}
	if q.Preset != "local-message" {
		t.Fatalf("Preset field %q", q.Preset)
	}
}

func TestUnknownPreset(t *testing.T) {
	_, err := Preset("kafka")
	if err == nil || !strings.Contains(err.Error(), `unknown preset "kafka"`) || !strings.Contains(err.Error(), "producer-message") {
		t.Fatalf("error %v should name the preset and list the known ones", err)
	}
}

// What each preset routes by, as documented in docs/presets.md.
func TestPresetRoutes(t *testing.T) {
	for _, c := range []struct {
		preset, exchange, routingKey string
	}{
		{"producer-message", "{exchange}", "{routing_key}"},
		{"local-message", "{exchange}", "{routing_key}"},
		{"message-record", "{topic}", "{tag}"},
		{"debezium", "{aggregatetype}", "{type}"},
		{"eventuate", "{destination}", "{destination}"},
	} {
		p, _ := Preset(c.preset)
		ex, rk := p.RouteTemplates()
		if ex != c.exchange || rk != c.routingKey {
			t.Errorf("%s routes by %s / %s, want %s / %s", c.preset, ex, rk, c.exchange, c.routingKey)
		}
	}
}

// What the presets give consumers written for the systems they imitate:
// Debezium's "id" header and Eventuate's message envelope, on by default
// only where they belong (docs/presets.md).
func TestPresetConsumerDefaults(t *testing.T) {
	for _, name := range PresetNames() {
		p, err := Preset(name)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := p.Eventuate.Envelope, name == "eventuate"; got != want {
			t.Errorf("%s: eventuate.envelope %v, want %v", name, got, want)
		}
	}
	d, _ := Preset("debezium")
	if !slices.Contains(d.Columns.Headers, "id") || d.Columns.MessageID != "id" {
		t.Errorf("debezium: headers %v, message id %q: the event id must travel in the id header", d.Columns.Headers, d.Columns.MessageID)
	}
}
