package metrics

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
)

// The replay's metrics are served on their own, labelled with the relay's
// name, and none of a relay's metrics come with them.
func TestReplayMetrics(t *testing.T) {
	r := NewReplay("orders-relay")
	r.ReplayTotal("shop.producer_message", 50)
	r.ReplayRows("shop.producer_message", "published", 7)
	r.ReplayRows("shop.producer_message", "failed", 1)
	r.ReplayCursor("shop.producer_message", 8)
	w := httptest.NewRecorder()
	r.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(w.Body)
	for _, want := range []string{
		`binlog_relay_replay_rows{name="orders-relay",table="shop.producer_message"} 50`,
		`binlog_relay_replay_rows_total{name="orders-relay",outcome="published",table="shop.producer_message"} 7`,
		`binlog_relay_replay_rows_total{name="orders-relay",outcome="failed",table="shop.producer_message"} 1`,
		`binlog_relay_replay_rows_done{name="orders-relay",table="shop.producer_message"} 8`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("missing %s", want)
		}
	}
	if strings.Contains(string(body), "binlog_relay_up") || strings.Contains(string(body), "messages_published_total") {
		t.Errorf("a relay's metrics are served by the replay:\n%s", body)
	}
}
