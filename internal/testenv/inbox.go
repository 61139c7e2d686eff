package testenv

import "testing"

// NewKeyedBroker is NewBroker with the queue bound by key alone, so that a
// message published with any other routing key is unroutable: pkg/inbox's
// tests of its retry task need a republish the broker cannot route.
func NewKeyedBroker(t testing.TB, key string) *Broker {
	t.Helper()
	b := NewBroker(t)
	if err := b.ch.QueueUnbind(b.Queue, "#", b.Exchange, nil); err != nil {
		t.Fatalf("unbinding queue: %v", err)
	}
	if err := b.ch.QueueBind(b.Queue, key, b.Exchange, false, nil); err != nil {
		t.Fatalf("binding queue by %s: %v", key, err)
	}
	return b
}
