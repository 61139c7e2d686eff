package config

import (
	"strings"
	"testing"
	"time"
)

const limitsBase = servers + `tables:
  - {preset: debezium, schema: a}
`

// The broker's size limit and the in-flight byte budget stay 0 when unset:
// the publisher's and the relay's defaults, RabbitMQ's own limit and 64 MiB
// (internal/app's stage tests); the dead-letter exchange defaults to none.
func TestBrokerLimitsAndBudgetDefaults(t *testing.T) {
	c := mustParse(t, limitsBase+`broker: {url: "amqp://guest:guest@127.0.0.1:5672/"}`+"\n")
	if c.Broker.MaxMessageBytes != 0 || c.Broker.DeadLetterExchange != "" || c.Relay.MaxInflightBytes != 0 {
		t.Fatalf("defaults: max_message_bytes %d, dead_letter_exchange %q, max_inflight_bytes %d",
			c.Broker.MaxMessageBytes, c.Broker.DeadLetterExchange, c.Relay.MaxInflightBytes)
	}
	c = mustParse(t, limitsBase+`broker: {url: "amqp://guest:guest@127.0.0.1:5672/", dead_letter_exchange: relay.dlx, max_message_bytes: 1048576}
relay: {max_inflight_bytes: 16777216}
`)
	if c.Broker.MaxMessageBytes != 1<<20 || c.Broker.DeadLetterExchange != "relay.dlx" || c.Relay.MaxInflightBytes != 16<<20 {
		t.Fatalf("set: %+v %+v", c.Broker, c.Relay)
	}
}

// A bad dead-letter exchange names its key (max_message_bytes is the
// publisher's: internal/app's stage tests).
func TestBrokerLimitsAndBudgetErrorsNameTheField(t *testing.T) {
	url := `"amqp://guest:guest@127.0.0.1:5672/"`
	for _, c := range []struct{ name, yaml, want string }{
		{"reserved dead-letter exchange", "broker: {url: " + url + ", dead_letter_exchange: amq.topic}\n", "broker.dead_letter_exchange: starts with amq., a prefix the broker reserves"},
		{"dead-letter exchange too long", "broker: {url: " + url + ", dead_letter_exchange: " + strings.Repeat("x", 300) + "}\n", "broker.dead_letter_exchange: 300 bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := parse(t, limitsBase+c.yaml, nil)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}

// relay.hold_backoff parses on its own (unset, each bound follows retry:,
// and its bounds are the publisher's: internal/app's stage tests).
func TestHoldBackoff(t *testing.T) {
	broker := `broker: {url: "amqp://guest:guest@127.0.0.1:5672/"}` + "\n"
	c := mustParse(t, limitsBase+broker+"retry: {base: 30s}\nrelay: {hold_backoff: {base: 200ms, max: 5s}}\n")
	if h := c.Relay.HoldBackoff; h.Base != 200*time.Millisecond || h.Max != 5*time.Second || c.Retry.Base != 30*time.Second {
		t.Fatalf("hold_backoff %+v, retry %+v", h, c.Retry)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"relay: {hold_backoff: {bse: 1s}}\n", "relay.hold_backoff.bse: unknown key"},
	} {
		_, err := parse(t, limitsBase+broker+tc.yaml, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.yaml, err, tc.want)
		}
	}
}
