package streamlane

import (
	"context"
	"errors"

	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/message"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/stream"
)

// Producer is what one Run publishes through: the stream client's producer
// and its environment in the binary (session), a scripted broker in tests
// (streamlanetest). The lane's state machine (machine.go) talks to nothing
// else, so the same machine runs over both.
type Producer interface {
	// Send writes a batch of messages (one frame); an error fails the lane.
	Send(batch []message.StreamMessage) error
	// Confirms delivers the broker's answers by publishing id; it is
	// closed when the producer is.
	Confirms() <-chan []Confirm
	// Closed delivers the event of the producer closed under the lane (the
	// connection lost, the stream deleted).
	Closed() <-chan stream.Event
	// Close closes the producer and what it runs on, within the connect
	// deadline even when ctx has ended.
	Close(ctx context.Context)
	// Broker names the broker that answered (redacted), for logs.
	Broker() string
}

// Confirm is the broker's answer about one publishing id: Err nil means
// stored (or dropped as a duplicate of one stored before).
type Confirm struct {
	ID  int64
	Err error
}

// Dial opens a Producer for a Run; an error fails the Run before any job
// is taken.
type Dial func(ctx context.Context) (Producer, error)

// errNotConfirmed: the client reported a message unconfirmed without a
// reason.
var errNotConfirmed = errors.New("not confirmed")

// toConfirms converts the client's statuses.
func toConfirms(sts []*stream.ConfirmationStatus) []Confirm {
	out := make([]Confirm, len(sts))
	for i, cs := range sts {
		out[i].ID = cs.GetPublishingId()
		if !cs.IsConfirmed() {
			out[i].Err = cs.GetError()
			if out[i].Err == nil {
				out[i].Err = errNotConfirmed
			}
		}
	}
	return out
}
