package status

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestBackoffGrowsAndCaps(t *testing.T) {
	b := Backoff{Base: time.Second, Factor: 2, Max: 10 * time.Second}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second}
	for i, w := range want {
		if got := b.Delay(i); got != w {
			t.Errorf("Delay(%d) = %s, want %s", i, got, w)
		}
	}
	b.Jitter = 0.2
	for i := 0; i < 100; i++ {
		d := b.Delay(1)
		if d < 1600*time.Millisecond || d > 2400*time.Millisecond {
			t.Fatalf("jittered delay %s outside 2s +/- 20%%", d)
		}
	}
	if d := b.Delay(5000); d > 12*time.Second {
		t.Fatalf("huge retry count gave %s", d)
	}
}

// fit keeps whole characters within both limits: characters (VARCHAR(n))
// and bytes (TEXT).
func TestFitKeepsUTF8(t *testing.T) {
	s := "ab" + "€€€" + "😀" // euro 3 bytes, emoji 4
	for chars := 0; chars <= 7; chars++ {
		for bytes := 0; bytes <= len(s)+1; bytes++ {
			got := fit(s, columnLimit{chars: chars, bytes: bytes})
			if len(got) > bytes || utf8.RuneCountInString(got) > chars || !utf8.ValidString(got) || !strings.HasPrefix(s, got) {
				t.Fatalf("fit(%d chars, %d bytes) = %q", chars, bytes, got)
			}
			// Longest: one more character would break a limit.
			if rest := s[len(got):]; rest != "" {
				_, size := utf8.DecodeRuneInString(rest)
				if utf8.RuneCountInString(got)+1 <= chars && len(got)+size <= bytes {
					t.Fatalf("fit(%d chars, %d bytes) = %q stopped early", chars, bytes, got)
				}
			}
		}
	}
}
