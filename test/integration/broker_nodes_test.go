package integration

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/binlog-relay/binlog-relay/internal/command"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/app"
	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/internal/testenv/relaytest"
)

// deadBrokerURL is the stack's broker URL on a loopback port nothing
// listens on: a node that is down.
func deadBrokerURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	u, err := url.Parse(testenv.AMQPURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = fmt.Sprintf("127.0.0.1:%d", port)
	return u.String()
}

// `check` with broker.urls dials every node: one that does not answer is a
// warning while another answers, and each is an ERROR when none does.
func TestCheckBrokerNodes(t *testing.T) {
	testenv.Integration(t)
	db := testenv.NewDB(t, "schema/producer_message.sql")
	dead1, dead2 := deadBrokerURL(t), deadBrokerURL(t)
	check := func(urls ...string) []string {
		return runCheck(t, relaytest.Config{Name: testenv.UniqueName("chk"), Tables: relaytest.SeedTable(db.Name),
			Sections: map[string]string{"broker": fmt.Sprintf(`{urls: ["%s"]}`, strings.Join(urls, `", "`))}}.YAML())
	}

	lines := check(dead1, testenv.AMQPURL, dead2)
	for _, dead := range []string{dead1, dead2} {
		if !findLine(lines, "WARN", "broker "+redact(dead), "cannot connect", "1 of 3 answer") {
			t.Errorf("no WARNING for the node down %s in:\n%s", redact(dead), strings.Join(lines, "\n"))
		}
	}
	if findLine(lines, "ERROR", "broker") || findLine(lines, redact(testenv.AMQPURL)) {
		t.Errorf("a line about the broker when one node answers:\n%s", strings.Join(lines, "\n"))
	}

	lines = check(dead1, dead2)
	for _, dead := range []string{dead1, dead2} {
		if !findLine(lines, "ERROR", "broker "+redact(dead), "cannot connect") {
			t.Errorf("no ERROR for %s when no node answers, in:\n%s", redact(dead), strings.Join(lines, "\n"))
		}
	}
	for _, l := range lines {
		if strings.Contains(l, "guest:guest@") {
			t.Errorf("a line shows the password: %s", l)
		}
	}
}

// `status` prints a line per broker node, whether it answers.
func TestStatusBrokerNodes(t *testing.T) {
	testenv.Integration(t)
	db := testenv.NewDB(t, "schema/producer_message.sql")
	dead := deadBrokerURL(t)
	yaml := relaytest.Config{Name: testenv.UniqueName("st"), Tables: relaytest.SeedTable(db.Name),
		Sections: map[string]string{"broker": fmt.Sprintf("{urls: [%q, %q]}", testenv.AMQPURL, dead)}}.YAML()
	cfg, err := config.Parse([]byte(yaml), os.LookupEnv)
	if err != nil {
		t.Fatal(err)
	}
	a, err := app.Open(cfg, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	var out bytes.Buffer
	_ = command.Status(context.Background(), a.Env(), &out) // no checkpoint: fine
	text := out.String()
	for _, want := range []string{
		"broker       " + redact(testenv.AMQPURL) + " (node 1 of 2) answers: RabbitMQ ",
		"broker       " + redact(dead) + " (node 2 of 2) does not answer",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("status has no line %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "guest:guest@") {
		t.Errorf("status shows the password:\n%s", text)
	}
}

// redact is publisher.Redact for the stack's guest URLs.
func redact(raw string) string { return strings.Replace(raw, "guest:guest@", "guest:xxxxx@", 1) }
