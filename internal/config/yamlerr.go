package config

// The YAML library's errors, rewritten to the line, the field and what is
// wrong: its decoding errors quote the value they could not decode (its
// first seven characters) or the key defined twice, an unknown alias
// quotes its name (a password starting with '*'), and a parser error's
// line is counted from 0. Nothing of the library's text that comes from
// the file is kept.

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

var yamlMsgRe = regexp.MustCompile(`^yaml: (?:line (\d+): )?(.*)$`)

// parserProblems are the messages of the parser (parserc.go), whose line
// yaml.v3 reports counted from 0; the scanner's are counted from 1.
var parserProblems = []string{
	"did not find expected <stream-start>", "did not find expected <document start>",
	"found undefined tag handle", "did not find expected '-' indicator", "did not find expected key",
	"did not find expected ',' or ']'", "did not find expected ',' or '}'",
	"found duplicate %YAML directive", "found incompatible YAML document", "found duplicate %TAG directive",
}

// syntaxHints say what usually causes a problem.
var syntaxHints = map[string]string{
	"could not find expected ':'":                     "a key without ':' after it?",
	"mapping values are not allowed in this context":  "a value holding ': ' must be quoted; or a line indented too far?",
	"did not find expected ',' or '}'":                "in a {...} mapping: a missing ',' or '}', or text after a quoted value?",
	"did not find expected ',' or ']'":                "in a [...] list: a missing ',' or ']'?",
	"did not find expected key":                       "a line indented differently from the keys around it, or a stray '}' or ']'?",
	"did not find expected '-' indicator":             "a list item without its '-'?",
	"found character that cannot start any token":     "a value starting with @, ` or % must be quoted; indentation is spaces, not tabs",
	"found a tab character that violates indentation": "indentation is spaces, not tabs",
	"found unexpected end of stream":                  "a quote left open?",
	"found unknown escape character":                  `in "..." a backslash starts an escape: write a value holding one in '...'`,
}

// syntaxError rewrites an error of parsing raw as YAML to its line, the
// problem and a hint.
func syntaxError(err error, raw []byte) error {
	m := yamlMsgRe.FindStringSubmatch(err.Error())
	if m == nil {
		return errors.New("parsing config: not valid YAML")
	}
	line, _ := strconv.Atoi(m[1])
	problem, hint := m[2], ""
	switch {
	case strings.HasPrefix(problem, "unknown anchor '"):
		name := strings.TrimSuffix(strings.TrimPrefix(problem, "unknown anchor '"), "' referenced")
		line = lineOf(raw, "*"+name)
		problem, hint = "an alias (*name) naming no anchor", "a value starting with '*' must be quoted"
	case slices.Contains(parserProblems, problem):
		line++
	case line == 0:
		line = 1 // the scanner leaves the first line unnumbered
	}
	if hint == "" {
		hint = syntaxHints[problem]
	}
	if !quotesOnlyPunctuation(problem) {
		// Not one of libyaml's fixed messages: it might quote the file.
		problem = "not valid YAML"
	}
	msg := "parsing config: "
	if line > 0 {
		msg += fmt.Sprintf("line %d: ", line)
	}
	msg += problem
	if hint != "" {
		msg += " (" + hint + ")"
	}
	if line > 0 && lineHasRef(raw, line) {
		// In a {...} mapping or [...] list, braces are YAML syntax.
		msg += " (inside {...} or [...], quote a ${VAR} value: \"${VAR}\")"
	}
	return errors.New(msg)
}

// quotesOnlyPunctuation reports whether every quoted part of s is one
// character (did not find expected ',' or '}').
func quotesOnlyPunctuation(s string) bool {
	for _, q := range []string{"'", `"`, "`"} {
		parts := strings.Split(s, q)
		if len(parts)%2 == 0 {
			return false
		}
		for i := 1; i < len(parts); i += 2 {
			if utf8.RuneCountInString(parts[i]) > 1 {
				return false
			}
		}
	}
	return true
}

// lineOf is the first line (1-based) of raw holding s, 0 if none does.
func lineOf(raw []byte, s string) int {
	for i, l := range strings.Split(string(raw), "\n") {
		if strings.Contains(l, s) {
			return i + 1
		}
	}
	return 0
}

// lineHasRef reports whether line n (1-based) of raw holds "${".
func lineHasRef(raw []byte, n int) bool {
	lines := strings.Split(string(raw), "\n")
	return n >= 1 && n <= len(lines) && strings.Contains(lines[n-1], "${")
}

// decodeError replaces err, from decoding node into a value of type t at
// path, with one error per value that could not be decoded, each naming
// its path, position and what the field takes.
func decodeError(node *yaml.Node, t reflect.Type, path string, err error) error {
	if errs := decodeProblems(node, t, path); len(errs) > 0 {
		return errors.Join(errs...)
	}
	// The walk found nothing the library did: keep its lines, not its text.
	where := nameOf(path)
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return fmt.Errorf("%s: a value that cannot be decoded", where)
	}
	var errs []error
	for _, e := range te.Errors {
		what := "a value of the wrong kind"
		if strings.Contains(e, "already defined") {
			what = "a key defined twice"
		}
		if m := typeErrorLineRe.FindStringSubmatch(e); m != nil {
			what += " (line " + m[1] + ")"
		}
		errs = append(errs, fmt.Errorf("%s: %s", where, what))
	}
	return errors.Join(errs...)
}

var typeErrorLineRe = regexp.MustCompile(`^line (\d+): `)

// nameOf names path in an error; the document itself has no path.
func nameOf(path string) string {
	if path == "" {
		return "parsing config"
	}
	return path
}

var (
	yamlNodeType    = reflect.TypeFor[yaml.Node]()
	unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()
	durationType    = reflect.TypeFor[time.Duration]()
)

// decodeProblems walks node against t as yaml.v3 decodes it and reports
// each value that does not decode into its field, and each key defined
// twice. Unknown keys were refused before (unknownKeys).
func decodeProblems(node *yaml.Node, t reflect.Type, path string) []error {
	for node != nil && node.Kind == yaml.AliasNode {
		node = node.Alias
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if node == nil || t == yamlNodeType || reflect.PointerTo(t).Implements(unmarshalerType) {
		return nil
	}
	if node.Kind == yaml.DocumentNode {
		var errs []error
		for _, n := range node.Content {
			errs = append(errs, decodeProblems(n, t, path)...)
		}
		return errs
	}
	if node.Kind == yaml.ScalarNode && node.ShortTag() == "!!null" {
		return nil // any field takes null: its zero value
	}
	name := nameOf(path)
	bad := func(expected string) []error {
		got := kindOf(node)
		if got == "a number" && strings.HasPrefix(expected, "a whole number") {
			got = "a number out of range or not whole"
		}
		return []error{fmt.Errorf("%s: expected %s, got %s (%s)", name, expected, got, position(node))}
	}
	switch t.Kind() {
	case reflect.Struct:
		if node.Kind != yaml.MappingNode {
			return bad("a mapping (key: value)")
		}
		fields, _ := yamlFields(t)
		return mappingProblems(node, path, func(k, v *yaml.Node) (reflect.Type, string) {
			if ft, ok := fields[k.Value]; ok {
				return ft, joinPath(path, k.Value)
			}
			return nil, joinPath(path, pathKey(k, v))
		}, t)
	case reflect.Map:
		if node.Kind != yaml.MappingNode {
			return bad("a mapping (key: value)")
		}
		return mappingProblems(node, path, func(k, v *yaml.Node) (reflect.Type, string) {
			return t.Elem(), joinPath(path, pathKey(k, v))
		}, t)
	case reflect.Slice, reflect.Array:
		if node.Kind != yaml.SequenceNode {
			return bad("a list")
		}
		var errs []error
		for i, n := range node.Content {
			errs = append(errs, decodeProblems(n, t.Elem(), fmt.Sprintf("%s[%d]", path, i))...)
		}
		return errs
	}
	if err := node.Decode(reflect.New(t).Interface()); err != nil {
		return bad(expectedOf(t))
	}
	return nil
}

// mappingProblems checks the entries of a mapping: each key once, each
// value against the type field gives for its key (nil: not checked).
// Merge keys (<<) bring their mappings' entries in, which keys written
// here override.
func mappingProblems(node *yaml.Node, path string, field func(k, v *yaml.Node) (reflect.Type, string), t reflect.Type) []error {
	var errs []error
	first := map[string]*yaml.Node{}
	for i := 0; i+1 < len(node.Content); i += 2 {
		k, v := node.Content[i], node.Content[i+1]
		if k.Value == "<<" { // as unknownKeys reads it
			merged := []*yaml.Node{v}
			if v.Kind == yaml.SequenceNode {
				merged = v.Content
			}
			for _, m := range merged {
				errs = append(errs, decodeProblems(m, t, path)...)
			}
			continue
		}
		ft, at := field(k, v)
		if f, dup := first[k.Value]; dup {
			if looksLikeKey(k, v) {
				errs = append(errs, fmt.Errorf("%s: defined twice (%s, and first at %s)", at, position(k), position(f)))
			} else {
				errs = append(errs, fmt.Errorf("%s: a key defined twice (%s, and first at %s)", nameOf(path), position(k), position(f)))
			}
			continue
		}
		first[k.Value] = k
		if ft != nil {
			errs = append(errs, decodeProblems(v, ft, at)...)
		}
	}
	return errs
}

// kindOf says what n is, without its value.
func kindOf(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.MappingNode:
		return "a mapping"
	}
	if n.Style&yaml.TaggedStyle != 0 {
		return "a value with a tag (!...)"
	}
	switch n.ShortTag() {
	case "!!int", "!!float":
		return "a number"
	case "!!bool":
		return "a boolean"
	}
	return "text"
}

// expectedOf says what a field of type t takes.
func expectedOf(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if t == durationType {
			return "a duration such as 500ms, 30s, 5m or 1h"
		}
		return "a whole number"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number, 0 or more"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a single value"
	}
	return "a value of another kind"
}

// yamlFields maps the YAML keys of struct type t to their fields' types;
// names lists the keys in field order.
func yamlFields(t reflect.Type) (fields map[string]reflect.Type, names []string) {
	fields = map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if !f.IsExported() || name == "-" || name == "" {
			continue
		}
		fields[name] = f.Type
		names = append(names, name)
	}
	return fields, names
}
