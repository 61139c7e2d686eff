// Package ident checks and quotes the identifiers the relay writes into SQL
// (schemas, tables, columns): only plain names pass, so quoting them is
// never the only defence.
package ident

import (
	"fmt"
	"regexp"
	"strings"
)

var identRe = regexp.MustCompile(`^[A-Za-z0-9_$]+$`)

// Check refuses identifiers with characters outside [A-Za-z0-9_$], so
// every name the relay quotes into SQL is plain. field names the setting in
// the error.
func Check(field, name string) error {
	if !identRe.MatchString(name) {
		return fmt.Errorf("%s: %q is not a valid identifier (use only A-Z a-z 0-9 _ $)", field, name)
	}
	return nil
}

// Quote quotes a validated identifier for MySQL.
func Quote(name string) string { return "`" + strings.ReplaceAll(name, "`", "``") + "`" }

// Placeholders is n comma-separated "?".
func Placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?,", n), ",")
}
