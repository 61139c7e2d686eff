package sweeper

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/publisher"
	"github.com/binlog-relay/binlog-relay/internal/rowstatus"
	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
	"github.com/binlog-relay/binlog-relay/pkg/router"
)

// racingPublisher confirms every job, and before it does, marks some rows
// SENT on the primary as the binlog path does when it publishes rows the
// sweeper took meanwhile (a relay frozen, or far behind).
type racingPublisher struct {
	db   *testenv.DB
	race map[string]bool // message ids the binlog path marks first
}

func (f *racingPublisher) Connected() bool { return true }

func (f *racingPublisher) Run(ctx context.Context, in <-chan publisher.Job[*Claimed], out chan<- publisher.Result[*Claimed]) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case j := <-in:
			if id := j.Msg.Publishing.MessageId; f.race[id] {
				if _, err := f.db.Primary.ExecContext(ctx, "UPDATE producer_message SET status = 'SENT' WHERE message_id = ? AND status IN ('PENDING','SENDING')", id); err != nil {
					return err
				}
			}
			select {
			case out <- publisher.Result[*Claimed]{Job: j}:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
}

// countingObserver records what the sweeper reports.
type countingObserver struct {
	mu                  sync.Mutex
	claims, alreadySent int
}

func (o *countingObserver) SweeperClaims(_ *outbox.Table, n int) {
	o.mu.Lock()
	o.claims += n
	o.mu.Unlock()
}
func (o *countingObserver) SweeperAlreadySent(_ *outbox.Table, n int) {
	o.mu.Lock()
	o.alreadySent += n
	o.mu.Unlock()
}

// Rows the sweeper published that the binlog path marked before the
// sweeper could were published twice: they are counted as duplicates
// (binlog_relay_published_already_sent_total), not only logged.
func TestSweeperCountsRowsTheBinlogPathMarkedFirst(t *testing.T) {
	testenv.Integration(t)
	db := testenv.NewPrimaryDB(t, "schema/producer_message.sql")
	for i := range 6 {
		db.Exec(t, "INSERT INTO producer_message (message_id, exchange, routing_key, content, create_time, update_time) VALUES (?, 'ex', 'rk', '{}', NOW(3) - INTERVAL 1 HOUR, NOW(3) - INTERVAL 1 HOUR)",
			fmt.Sprintf("dup-%d", i))
	}
	tb := table(t, "producer-message", func(tb *outbox.Table) { tb.Schema = db.Name })
	rt, err := router.New([]*outbox.Table{tb}, router.WithAppID("test"))
	if err != nil {
		t.Fatal(err)
	}
	pub := &racingPublisher{db: db, race: map[string]bool{"dup-1": true, "dup-4": true}}
	s, err := New(Config{BatchSize: 10}, []*outbox.Table{tb}, db.Primary, db.Primary, pub, rt,
		rowstatus.NewWriter(db.Primary, rowstatus.Retry{}), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	obs := &countingObserver{}
	s.SetObserver(obs)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = pub.Run(ctx, s.jobs, s.results) }()

	r, err := s.sweepBatch(ctx, s.plans[0])
	if err != nil {
		t.Fatal(err)
	}
	if r.claimed != 6 || r.sent != 4 {
		t.Fatalf("claimed %d, marked %d; want 6 claimed, 4 marked by the sweeper", r.claimed, r.sent)
	}
	if obs.claims != 6 || obs.alreadySent != 2 {
		t.Fatalf("observer: %d claimed, %d already sent; want 6 and 2", obs.claims, obs.alreadySent)
	}
	if n := db.Count(t, "SELECT COUNT(*) FROM producer_message WHERE status = 'SENT'"); n != 6 {
		t.Fatalf("%d rows SENT, want 6", n)
	}
}
