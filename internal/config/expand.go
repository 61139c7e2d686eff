package config

import (
	"errors"
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"
)

// expandNode replaces ${VAR} and ${VAR:-default} in the string values of a
// parsed document, never in keys or comments (a comment mentioning ${ENV}
// is only a comment). Expanding after parsing means a value's text cannot
// change the YAML: a secret holding " #", quotes, braces or ": " arrives
// whole. "$$" is an escaped "$" ("$${X}" is the literal text "${X}"); any
// other "$" is kept as it is ($ is legal in MySQL identifiers). An unset
// variable without a default is an error naming the field and the
// variable, never a value; with unset (lint) it expands to nothing and
// unset is told the field and the variable.
func expandNode(root *yaml.Node, lookup func(string) (string, bool), unset func(path, name string)) error {
	var errs []error
	seen := map[*yaml.Node]bool{}
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		// An alias points at a node expanded where it is defined; expanding
		// it twice would undo a "$$" escape.
		if n == nil || n.Kind == yaml.AliasNode || seen[n] {
			return
		}
		seen[n] = true
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				walk(c, path)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				walk(n.Content[i+1], joinPath(path, pathKey(n.Content[i], n.Content[i+1])))
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				walk(c, fmt.Sprintf("%s[%d]", path, i))
			}
		case yaml.ScalarNode:
			if !strings.Contains(n.Value, "$") {
				return
			}
			v, missing := expandString(n.Value, lookup)
			if len(missing) > 0 && unset != nil {
				for _, name := range missing {
					unset(path, name)
				}
				missing = nil
			}
			if len(missing) > 0 {
				errs = append(errs, fmt.Errorf("%s: unset environment variable %s (%s; set it or give a default: ${%s:-value})",
					path, strings.Join(missing, ", "), position(n), missing[0]))
				return
			}
			retag(n, v)
		}
	}
	walk(root, "")
	return errors.Join(errs...)
}

// retag sets a scalar's expanded value. A plain (unquoted, untagged) value
// such as port: ${PORT:-3306} is resolved again, so it can fill a number,
// a boolean or a duration; one that would resolve to null ("null", "~")
// stays a string, so a password is never dropped for looking like YAML.
func retag(n *yaml.Node, v string) {
	n.Value = v
	if n.Style&(yaml.TaggedStyle|yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle|yaml.LiteralStyle|yaml.FoldedStyle) != 0 {
		return
	}
	probe := yaml.Node{Kind: yaml.ScalarNode, Value: v}
	switch probe.ShortTag() {
	case "!!int", "!!float", "!!bool":
		n.Tag = ""
	default:
		n.Tag = "!!str"
	}
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// expandString expands one value; missing lists unset variables without a
// default.
func expandString(s string, lookup func(string) (string, bool)) (out string, missing []string) {
	var b strings.Builder
	for i := 0; i < len(s); {
		if s[i] != '$' {
			b.WriteByte(s[i])
			i++
			continue
		}
		if strings.HasPrefix(s[i:], "$$") {
			b.WriteByte('$')
			i += 2
			continue
		}
		name, def, hasDef, n := parseRef(s[i:])
		if n == 0 { // not a reference: a literal $
			b.WriteByte('$')
			i++
			continue
		}
		if v, ok := lookup(name); ok {
			b.WriteString(v)
		} else if hasDef {
			b.WriteString(def)
		} else {
			missing = append(missing, name)
		}
		i += n
	}
	return b.String(), missing
}

// parseRef reads "${NAME}" or "${NAME:-default}" at the start of s and
// returns its length, 0 when s does not start with one. The default runs to
// the first "}".
func parseRef(s string) (name, def string, hasDef bool, n int) {
	if !strings.HasPrefix(s, "${") {
		return "", "", false, 0
	}
	end := strings.IndexByte(s, '}')
	if end < 0 {
		return "", "", false, 0
	}
	body := s[2:end]
	name, def, hasDef = strings.Cut(body, ":-")
	if !validEnvName(name) {
		return "", "", false, 0
	}
	return name, def, hasDef, end + 1
}

func validEnvName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		switch {
		case r == '_', r >= 'A' && r <= 'Z', r >= 'a' && r <= 'z':
		case r >= '0' && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}
