package command

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// requeue refuses what it cannot do before it writes the primary (nil
// here).
func TestRequeueRefused(t *testing.T) {
	e := Env{Cfg: &config.Config{Tables: []*outbox.Table{table("shop", "outbox", true)}}}
	future := time.Now().Add(time.Hour).Truncate(time.Second)
	cases := []struct {
		o    RequeueOptions
		want string
	}{
		{RequeueOptions{}, "requeue: --failed is required (it names what is requeued: FAILED rows)"},
		{RequeueOptions{Failed: true, Table: "billing.outbox"}, "requeue: --table billing.outbox is not configured (shop.outbox)"},
		{RequeueOptions{Failed: true, Since: future}, "requeue: --since " + future.Format(time.RFC3339) + " is in the future"},
	}
	for _, c := range cases {
		if err := Requeue(context.Background(), e, c.o, io.Discard); errString(err) != c.want {
			t.Errorf("%+v: %v, want %q", c.o, err, c.want)
		}
	}
}
