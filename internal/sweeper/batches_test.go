package sweeper

import (
	"context"
	"errors"
	"testing"
	"time"
)

// inBatches stops at the first short batch, pauses only between full ones,
// and stops on an error with what was done so far.
func TestInBatches(t *testing.T) {
	boom := errors.New("boom")
	cases := []struct {
		name        string
		size        int
		returns     []int64
		err         error // returned by the last batch
		wantTotal   int64
		wantBatches int
	}{
		{"nothing to do", 1000, []int64{0}, nil, 0, 1},
		{"one short batch", 1000, []int64{10}, nil, 10, 1},
		{"2,500 rows in batches of 1,000", 1000, []int64{1000, 1000, 500}, nil, 2500, 3},
		{"an exact multiple needs one empty batch to know it is done", 1000, []int64{1000, 1000, 0}, nil, 2000, 3},
		{"an error keeps the rows done", 1000, []int64{1000, 0}, boom, 1000, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			var last time.Time
			var gaps []time.Duration
			total, batches, err := inBatches(context.Background(), tc.size, 5*time.Millisecond, func() (int64, error) {
				if !last.IsZero() {
					gaps = append(gaps, time.Since(last))
				}
				last = time.Now()
				n := tc.returns[calls]
				calls++
				if calls == len(tc.returns) && tc.err != nil {
					return 0, tc.err
				}
				return n, nil
			})
			if !errors.Is(err, tc.err) {
				t.Fatalf("err %v, want %v", err, tc.err)
			}
			if total != tc.wantTotal || batches != tc.wantBatches {
				t.Errorf("total %d in %d batches, want %d in %d", total, batches, tc.wantTotal, tc.wantBatches)
			}
			for _, g := range gaps {
				if g < 5*time.Millisecond {
					t.Errorf("batches %s apart, want the 5ms pause between them", g)
				}
			}
		})
	}
}

func TestInBatchesStopsWhenCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	_, _, err := inBatches(ctx, 10, time.Hour, func() (int64, error) {
		calls++
		cancel()
		return 10, nil
	})
	if !errors.Is(err, context.Canceled) || calls != 1 {
		t.Errorf("err %v after %d calls", err, calls)
	}
}
