package ratelog

import (
	"testing"
	"time"
)

func TestAllow(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	type call struct {
		key      string
		at       time.Duration // after t0
		ok       bool
		repeated int
	}
	for _, tc := range []struct {
		name  string
		keys  int
		calls []call
	}{
		{"the first line goes through", 10, []call{{"a", 0, true, 0}}},
		{"repeats within the interval are held back and counted", 10, []call{
			{"a", 0, true, 0}, {"a", time.Second, false, 0}, {"a", 59 * time.Second, false, 0},
			{"a", time.Minute, true, 2}, {"a", 2 * time.Minute, true, 0},
		}},
		{"keys are apart", 10, []call{
			{"a", 0, true, 0}, {"b", time.Second, true, 0}, {"a", 2 * time.Second, false, 0},
			{"b", time.Minute, false, 0}, {"a", time.Minute, true, 1}, {"b", 61 * time.Second, true, 1},
		}},
		{"past the bound every key is forgotten", 2, []call{
			{"a", 0, true, 0}, {"b", 0, true, 0}, {"a", time.Second, false, 0},
			{"c", time.Second, true, 0}, {"a", 2 * time.Second, true, 0},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := New(time.Minute, tc.keys)
			for i, c := range tc.calls {
				repeated, ok := l.Allow(c.key, t0.Add(c.at))
				if ok != c.ok || repeated != c.repeated {
					t.Errorf("call %d (%s at %s): Allow = %d, %v; want %d, %v", i, c.key, c.at, repeated, ok, c.repeated, c.ok)
				}
			}
		})
	}
}
