package streamlane_test

// The lane's state machine over the fake broker (streamlanetest): the
// failure paths, without a RabbitMQ.

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/publisher"
	"github.com/binlog-relay/binlog-relay/internal/streamlane"
	"github.com/binlog-relay/binlog-relay/internal/streamlane/streamlanetest"
)

func fakeLane(t *testing.T, b *streamlanetest.Broker) *streamlane.Lane[int] {
	t.Helper()
	l, err := streamlane.NewWith[int](streamlane.Config{Stream: "s", ProducerName: "p", Window: 8, ConfirmTimeout: time.Second},
		b.Dial("p"), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// A lane that fails with a message unconfirmed fails the markers behind
// it too, and Restarting hands on nothing from that message on: the
// commit behind it never reaches the committer.
func TestFailedLaneFailsMarkersBehind(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := streamlanetest.NewBroker()
		l := fakeLane(t, b)
		// marker, m1, marker, m2, marker, m3, marker
		var js []publisher.Job[int]
		for i := 1; i <= 3; i++ {
			js = append(js, publisher.Job[int]{Tag: len(js)})
			js = append(js, publisher.Job[int]{Tag: len(js), Msg: message(i), Seq: uint64(i)})
		}
		js = append(js, publisher.Job[int]{Tag: len(js)})
		for _, restarting := range []bool{false, true} {
			in := make(chan publisher.Job[int], len(js))
			for _, j := range js {
				in <- j
			}
			out := make(chan publisher.Result[int], len(js))
			done := make(chan error, 1)
			go func() {
				if restarting {
					done <- streamlane.Restarting[int]{Lane: l}.Run(context.Background(), in, out)
				} else {
					done <- l.Run(context.Background(), in, out)
				}
			}()
			synctest.Wait()
			p := b.Producer("p")
			p.Confirm(1, false) // m1 (or its replay)
			synctest.Wait()
			p.Cut("connection lost") // m2 and m3 unanswered
			err := <-done
			close(in)
			if err == nil {
				t.Fatal("Run returned nil after the producer was closed")
			}
			if restarting && !errors.As(err, new(*streamlane.Failure)) {
				t.Fatalf("Restarting.Run returned %v, want a *Failure", err)
			}
			close(out)
			var got []string
			for r := range out {
				switch {
				case r.Err == nil:
					got = append(got, "ok")
				case errors.Is(r.Err, streamlane.ErrUnconfirmed):
					got = append(got, "unconfirmed")
				default:
					got = append(got, r.Err.Error())
				}
			}
			want := []string{"ok", "ok", "ok", "unconfirmed", "unconfirmed", "unconfirmed", "unconfirmed"}
			if restarting {
				want = want[:3] // marker, m1, marker: nothing from m2 on
			}
			if len(got) != len(want) {
				t.Fatalf("restarting=%v: results %v, want %v", restarting, got, want)
			}
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("restarting=%v: results %v, want %v", restarting, got, want)
				}
			}
		}
	})
}
