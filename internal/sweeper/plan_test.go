package sweeper

import (
	"testing"
	"time"

	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// A table with a SENDING value but neither updated_at nor next_retry_time
// has nothing to date a claim by: a row claimed SENDING by a sweeper
// SIGKILLed before its SENT write could never be told from one in flight
// (no zombie reset, no lease) and stayed SENDING forever. Such a table is
// claimed under row locks instead, as one without SENDING: the rows stay
// pending while published, and a dead sweeper's locks go with its
// connection. Rows already SENDING (inserted so, or left by an older
// version's claim) are reset by their created_at.
func TestSendingWithoutAnAgeColumnClaimsUnderRowLocks(t *testing.T) {
	const (
		grace  = time.Minute
		zombie = 5 * time.Minute
	)
	tb := table(t, "producer-message", func(tb *outbox.Table) {
		tb.Columns.UpdatedAt, tb.Columns.NextRetryTime = "", ""
	})
	if err := tb.Validate("tables[0]"); err != nil {
		t.Fatal(err)
	}
	p, err := newPlan(tb)
	if err != nil {
		t.Fatal(err)
	}
	if p.mode != modeLocked {
		t.Fatalf("mode %s, want %s", p.mode, modeLocked)
	}
	if p.LeaseOnClaim() {
		t.Error("the claim sets a lease on a table without next_retry_time")
	}
	const due = "`status` = 'PENDING' AND `create_time` < NOW(3) - INTERVAL ? MICROSECOND"
	const stuck = "`status` = 'SENDING' AND `create_time` < NOW(3) - INTERVAL ? MICROSECOND"
	q, args := p.LookSQL(grace, zombie)
	check(t, "look", q, args, stmt{"SELECT EXISTS(SELECT 1 FROM `app`.`producer_message` WHERE " + due + "), EXISTS(SELECT 1 FROM `app`.`producer_message` WHERE " + stuck + ")",
		[]any{int64(60_000_000), int64(300_000_000)}})
	q, args = p.ClaimSQL(grace, 500)
	check(t, "claim", q, args, stmt{"SELECT `content`, `exchange`, `id`, `max_retry_count`, `message_id`, `retry_count`, `routing_key`, `version` FROM `app`.`producer_message` WHERE " + due + " LIMIT ? FOR UPDATE SKIP LOCKED",
		[]any{int64(60_000_000), 500}})
	if q, args := p.ClaimUpdateSQL(2, zombie); q != "" {
		t.Errorf("the claim writes the rows (%s %v): the lock alone must be the claim", q, args)
	}
	q, args, ok := p.ZombieResetSQL(zombie, 500)
	if !ok {
		t.Fatal("no zombie reset: rows already SENDING are never sent")
	}
	check(t, "zombie reset", q, args, stmt{"UPDATE `app`.`producer_message` SET `status` = 'PENDING', `error_msg` = ?, `version` = `version` + 1 WHERE " + stuck + " LIMIT ?",
		[]any{"reset to pending: SENDING for more than 5m0s (its sweeper stopped mid-publish)", int64(300_000_000), 500}})
	// The settling writes are checked against the status the rows stayed in.
	if len(p.Claimed) != 1 || p.Claimed[0] != "PENDING" {
		t.Errorf("claimed rows are looked for in %v, want [PENDING]", p.Claimed)
	}
}
