package config

// What a config error may show of the file: the key and the line, never a
// value. A mistake can leave a password anywhere: a flow mapping missing a
// ':' ({user: relay, password S3cr3t}) makes "password S3cr3t" a key, a
// line run into the one before makes it part of another key's value, and
// the YAML library quotes the values it cannot decode. So a key is shown
// only when it looks like one, the config's own messages say what a field
// takes rather than quote what it holds, the library's messages are
// rewritten (yamlerr.go), and scrub cuts out what a stage package's
// validation might still quote.

import (
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/go-sql-driver/mysql"
	"gopkg.in/yaml.v3"
)

// maxKeyLen is the longest key an error shows; the config's longest is
// half of it.
const maxKeyLen = 40

// keyRe is what a key looks like: every key of the config matches it, so
// a typo of one does too and is shown as written.
var keyRe = regexp.MustCompile(`^[a-z0-9_.-]+$`)

// envKeyRe is a ${VAR} reference written as a key: a name, shown (keys are
// never expanded, so it is refused as an unknown key).
var envKeyRe = regexp.MustCompile(`^\$\{[A-Za-z_][A-Za-z0-9_]*\}$`)

// looksLikeKey reports whether key k (with value v) may be shown as it is.
func looksLikeKey(k, v *yaml.Node) bool {
	return k.Kind == yaml.ScalarNode && utf8.RuneCountInString(k.Value) <= maxKeyLen &&
		(keyRe.MatchString(k.Value) || envKeyRe.MatchString(k.Value)) && !withoutColon(k, v)
}

// withoutColon reports whether k is an entry of a flow mapping written
// without ':' ({host: h, S3cr3t}): YAML reads it as a key with a null
// value that starts where the key ends.
func withoutColon(k, v *yaml.Node) bool {
	if v == nil || v.Kind != yaml.ScalarNode || v.Tag != "!!null" || v.Value != "" || v.Line != k.Line {
		return false
	}
	width := utf8.RuneCountInString(k.Value)
	if k.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0 {
		width += 2
	}
	return v.Column <= k.Column+width
}

// unknownKeyName is how an unknown key k (value v) of a mapping whose keys
// are known is named: as written when it looks like a key, else what it
// probably is, in <...>, without its text past the first word, and that
// word only when it is one of the known keys.
func unknownKeyName(k, v *yaml.Node, known []string) string {
	if looksLikeKey(k, v) {
		return k.Value
	}
	key := k.Value
	switch {
	case k.Kind != yaml.ScalarNode:
		return "<a key that is a list or a mapping>"
	case strings.ContainsFunc(key, unicode.IsSpace):
		first := strings.FieldsFunc(key, unicode.IsSpace)[0]
		if slices.Contains(known, first) {
			return fmt.Sprintf("<a key with a space in it: a missing ':' after %q?>", first)
		}
		return "<a key with a space in it: a missing ':' or ','?>"
	case withoutColon(k, v):
		return "<an entry without ':': a value without its key?>"
	case utf8.RuneCountInString(key) > maxKeyLen:
		return fmt.Sprintf("<a key of %d characters: a value in the wrong place?>", utf8.RuneCountInString(key))
	}
	return "<a key that is not lowercase letters, digits and _>"
}

// looksLikeName reports whether a value reads as one of the config's names
// (a preset): only such a value is quoted back, beside the names known.
func looksLikeName(v string) bool { return len(v) <= maxKeyLen && keyRe.MatchString(v) }

// pathKey is how a map's key k (value v) appears in a path: as written
// when it looks like a key, else by its position.
func pathKey(k, v *yaml.Node) string {
	if looksLikeKey(k, v) {
		return k.Value
	}
	return fmt.Sprintf("<the key at line %d, column %d>", k.Line, k.Column)
}

// position is "line L, column C" of n.
func position(n *yaml.Node) string { return fmt.Sprintf("line %d, column %d", n.Line, n.Column) }

// showPath is how a password_file error names the file: as written when it
// reads as a path, else not at all, since a password put in password_file
// by mistake would be printed as the file it could not read.
func showPath(p string) string {
	if (filepath.IsAbs(p) || strings.HasPrefix(p, "./") || strings.HasPrefix(p, "../")) &&
		!strings.ContainsFunc(p, unicode.IsSpace) && len(p) <= 4096 {
		return p
	}
	return "the file it names (not shown: not an absolute or ./ path; a password itself goes in password:)"
}

// minBare is the shortest secret cut out where it is not quoted: a
// shorter one could match the message's own words ("relay" in
// "relay.ordering"), and the gap would tell it.
const minBare = 8

// secretKeys hold a secret as their whole value; urlKeys may hold one in
// their user info.
var (
	secretKeys = []string{"password", "dsn"}
	urlKeys    = []string{"url", "management_url"}
)

// redactions are what scrub cuts out of an error: the secrets (the values
// of the password and DSN keys, the passwords in URLs and DSNs, those read
// from password files) wherever they occur, and every key or value with a
// space in it (a line run into another) where it is quoted as a value.
type redactions struct {
	secrets, spaced []string
}

// addFile adds root's values.
func (r *redactions) addFile(root *yaml.Node) {
	seen := map[*yaml.Node]bool{}
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		if n == nil || seen[n] {
			return
		}
		seen[n] = true
		for i := 0; n.Kind == yaml.MappingNode && i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			switch {
			case v.Kind != yaml.ScalarNode:
			case slices.Contains(secretKeys, k.Value):
				r.secrets = append(r.secrets, v.Value)
				if d, err := mysql.ParseDSN(v.Value); err == nil {
					r.secrets = append(r.secrets, d.Passwd)
				}
			case slices.Contains(urlKeys, k.Value):
				r.secrets = append(r.secrets, urlPassword(v.Value))
			}
		}
		if n.Kind == yaml.ScalarNode && strings.ContainsFunc(n.Value, unicode.IsSpace) {
			r.spaced = append(r.spaced, n.Value)
		}
		for _, c := range n.Content {
			walk(c)
		}
	}
	walk(root)
}

// urlPassword is the password in a URL's user info, "" without one.
func urlPassword(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return ""
	}
	pw, _ := u.User.Password()
	return pw
}

// scrub returns err with each redaction in its text replaced by
// <redacted>; err itself when none occurs.
func (r *redactions) scrub(err error) error {
	if err == nil {
		return nil
	}
	var forms []string
	for _, s := range r.secrets {
		if s == "" {
			continue
		}
		forms = append(forms, strconv.Quote(s))
		if len(s) >= minBare {
			forms = append(forms, s)
		}
	}
	for _, s := range r.spaced {
		forms = append(forms, strconv.Quote(s))
	}
	// Longest first, so a secret holding another is cut out whole.
	sort.SliceStable(forms, func(i, j int) bool { return len(forms[i]) > len(forms[j]) })
	text := err.Error()
	out := text
	for _, f := range forms {
		out = strings.ReplaceAll(out, f, "<redacted>")
	}
	if out == text {
		return err
	}
	return errors.New(out)
}
