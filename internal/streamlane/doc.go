// Package streamlane publishes the relay's rows into a RabbitMQ stream
// (the stream protocol, github.com/rabbitmq/rabbitmq-stream-go-client) with
// broker-side deduplication, so that a replayed row is stored once: an
// effectively-once lane beside internal/publisher's AMQP lanes.
//
// # Deduplication
//
// A producer with a name keeps, on the broker, the highest publishing id it
// has stored on the stream; a message whose publishing id is at most that is
// dropped by the broker and still confirmed. The relay gives each row a
// publishing id (publisher.Job.Seq) that is the same on every replay and
// increasing in binlog order, so after a crash the rows replayed from the
// last checkpoint are confirmed again without being stored twice. This
// holds while:
//
//   - every run uses the same Config.ProducerName on the same Config.Stream,
//     and no other producer (another lane, another relay) uses that name on
//     that stream at the same time;
//   - publishing ids increase in the order the rows are published (the lane
//     refuses, within one Run, an id not above the one before it, and the id
//     0, which the broker cannot tell from "nothing stored");
//   - the stream keeps its producer state: it does not hold across a
//     deletion of the stream (the new stream starts with nothing stored) or
//     a change of the producer name (the new name starts with nothing
//     stored). The broker keeps the last id per producer name per stream in
//     the stream itself, so retention (max-length-bytes, max-age) does not
//     lose it.
//
// A consequence to keep in mind: the broker drops every id at or below the
// stored one, so a row that failed and is published again later with its
// old id, after rows with higher ids were stored, is dropped too (and
// confirmed). A row retried that way needs a new id above
// LastPublishingID.
//
// # Outcomes and failures
//
// Results come out in exactly the order the jobs came in; a marker (Msg nil)
// comes out unchanged in its place, once every message before it is
// settled. Err nil means the broker confirmed the message: stored, or
// dropped as a duplicate of one stored before. A message refused before it
// was sent (ErrRefused: a bad publishing id, a message over the frame size)
// fails alone and the lane goes on: it was never on the stream. Anything
// else (a publish error from the broker, a confirm not in within
// ConfirmTimeout, the producer closed by the broker, the connection lost)
// fails the lane: every job not yet confirmed comes out in order with Err
// wrapping ErrUnconfirmed, and so does every marker behind such a message
// (its transaction is not settled: a commit applied there would let the
// checkpoint pass a row whose outcome is unknown); then Run returns the
// cause. Restarting hands on only what came before the first of them.
// The lane does not reconnect by itself: its fate is the relay pipeline's,
// which the app restarts from the checkpoint, and the rows replayed then
// are deduplicated by the broker. Going on after such a failure could
// store a later row before an earlier one's retry, which the broker would
// then drop as a duplicate; stopping keeps what is stored a prefix of the
// binlog order. (That prefix rests on the broker: RabbitMQ refuses
// publishes per producer and stream, not per message, so the messages in
// flight behind a refused one are refused too. A broker that stored a
// later one anyway would leave a gap a replay cannot fill.)
//
// Every call into the client runs with a deadline (Config.ConnectTimeout):
// the client has calls that retry without end while the broker is down
// (the locator reconnect) or that dial without a timeout; such a call is
// abandoned, and whatever it opens later is closed.
package streamlane
