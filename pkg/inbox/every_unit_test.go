package inbox

import (
	"context"
	"testing"
	"time"
)

// every runs a round at once, then one per interval, and returns nil when
// its context ends.
func TestEveryRunsRoundsUntilDone(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	rounds := 0
	err := every(ctx, time.Millisecond, func() {
		if rounds++; rounds == 3 {
			cancel()
		}
	})
	if err != nil || rounds != 3 {
		t.Errorf("every returned %v after %d rounds, want nil after 3 (the last one cancels)", err, rounds)
	}
}
