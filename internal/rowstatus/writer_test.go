package rowstatus

import (
	"strings"
	"testing"
	"unicode/utf8"
)

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
