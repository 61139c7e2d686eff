// Package inbox makes a RabbitMQ consumer idempotent with a transactional inbox.
//
// The relay delivers outbox rows at least once: a crash, a replay or the sweeper racing
// the binlog path can publish a message twice, and the broker redelivers anything not
// ACKed. The inbox turns that into exactly-once effects for handlers whose work lives
// in the same database as the inbox table (consumer_message, schema in
// schema/consumer_message.sql).
//
// # Flow of one delivery
//
//  1. No usable message id (missing, too long, not UTF-8): record a FAILED row under an
//     id derived from the delivery, ACK.
//  2. Optional Redis fast path: a marker written after a SUCCESS commit means "done":
//     ACK without touching the database.
//  3. In one transaction: INSERT the row as SUCCESS, run the Handler with that
//     transaction, COMMIT, then ACK. The row becomes visible only together with the
//     handler's work; there is no moment where it says "done" for work that did not
//     happen.
//  4. The INSERT hits the unique key (consumer, message_id): the row exists. SUCCESS,
//     FAILED or PENDING_RETRY: ACK without work (a PENDING_RETRY message belongs to the
//     retry task, which keeps its backoff and republishes the stored body when due).
//     RETRYING (the retry task republished it): lock the row, run the handler again,
//     turn the row SUCCESS with a version-checked update, COMMIT, ACK.
//  5. The handler returns an error: roll its work back, then record PENDING_RETRY with
//     a backoff, or FAILED when the retries are used up or the error wraps
//     ErrMalformed, with the error text; ACK. A failing message never loops in the
//     broker.
//  6. The database cannot be reached: nothing is known, so the delivery is requeued
//     (after RequeueDelay), never ACKed.
//
// A concurrent copy of a message blocks on the unique key until the first transaction
// ends, then finds the row (or, if the first rolled back, inserts it itself).
//
// # Guarantees
//
// The handler's effects commit at most once per (consumer, message id) while the row
// exists, and every delivered message ends as SUCCESS or FAILED (given a running retry
// task). An ACK is sent only after the transaction that decided the outcome committed;
// a crash before the ACK leads to a redelivery that finds the row. The duplicate window
// reopens only when Retention purges a SUCCESS row.
//
// # Retries
//
// A Retrier (started by Consumer.Run unless DisableRetryTask) claims due PENDING_RETRY
// rows with FOR UPDATE SKIP LOCKED, marks them RETRYING, and republishes the stored
// body with its message id. RETRYING rows not consumed within RetryStuckTimeout are
// taken back. Any number of processes may run it.
//
// # Headers and trace context
//
// Message.Headers are the delivery's AMQP headers. The inbox table keeps them (the
// headers column) and the retry task republishes them with the body, plus
// x-inbox-retry-count. A valid W3C traceparent header puts its span context into the
// handler's ctx (SpanContextFromContext), parsed with the standard library;
// pkg/inbox/otelinbox hands the headers to an OpenTelemetry propagator instead, and
// WithContextFromHeaders takes any other extraction.
//
// # Metrics and logs
//
// Pass a Metrics (WithMetrics) to count processed, duplicate, retried and failed
// deliveries; Counters is a ready-made implementation.
//
// New, NewRetrier and NewPurger take a *slog.Logger (nil logs nothing), as every
// public package of this module does: state changes and retries scheduled at info, a
// message FAILED at warn, one dropped at error, with the fields consumer, message_id,
// exchange and routing_key. A program that logs with zap passes
// slog.New(zapslog.NewHandler(zapLogger.Core())) (Example_zap).
//
// docs/inbox.md describes the table, the state machine and every Config field;
// examples/order-inventory runs the whole outbox-to-inbox flow.
package inbox
