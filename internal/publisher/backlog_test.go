package publisher

import (
	"testing"

	"github.com/binlog-relay/binlog-relay/pkg/router"
)

// The "broker connected" line splits what waits for the new channel: the
// messages in flight on the lost one (published again, counted in
// Republished) and those never published; markers and settled entries are
// neither.
func TestBacklogSplitsRepublishedFromQueued(t *testing.T) {
	msg := &router.Message{}
	m := &machine[int]{q: []*entry[int]{
		{job: Job[int]{Msg: msg}, state: waiting, unknown: true},
		{job: Job[int]{Msg: msg}, state: waiting, unknown: true},
		{job: Job[int]{Msg: msg}, state: done},
		{job: Job[int]{}},
		{job: Job[int]{Msg: msg}, state: waiting},
		{job: Job[int]{Msg: msg}, state: waiting},
		{job: Job[int]{Msg: msg}, state: waiting},
	}}
	if again, queued := m.backlog(); again != 2 || queued != 3 {
		t.Fatalf("backlog: republishing %d, queued %d; want 2, 3", again, queued)
	}
}
