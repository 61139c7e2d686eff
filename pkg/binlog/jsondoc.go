package binlog

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/go-mysql-org/go-mysql/replication"
)

// A JSON document as go-mysql renders a binary JSON value in MySQL text
// mode (compact, MySQL's key order, its number forms), edited by the
// diffs of a partial update and rendered back the same way: values keep
// their text as rendered, object keys are kept in MySQL's binary order
// (shorter keys first, then by bytes: json_binary.cc), which is the order
// go-mysql renders the committed document in.

// jsonNode is a value: an object (keys set), an array (items set) or a
// scalar (raw text).
type jsonNode struct {
	raw   []byte // a scalar's text
	isObj bool
	isArr bool
	keys  []jsonKey
	vals  []*jsonNode
	items []*jsonNode
}

type jsonKey struct {
	name string // decoded
	raw  []byte // as rendered, quotes included
}

// applyDiffs applies a partial update's diffs, in order, to the before
// image's document (a string as go-mysql renders it) and returns the
// document as go-mysql would render the committed one.
func applyDiffs(before any, diffs []rawDiff) (string, error) {
	var text string
	switch v := before.(type) {
	case string:
		text = v
	case []byte:
		text = string(v)
	case nil:
		return "", errors.New("the before image has no document (NULL)")
	default:
		return "", fmt.Errorf("the before image holds %T, not a document", before)
	}
	p := jsonParser{b: []byte(text)}
	doc, err := p.value()
	if err != nil {
		return "", fmt.Errorf("reading the before image's document: %w", err)
	}
	if p.skipSpace(); p.i != len(p.b) {
		return "", errors.New("reading the before image's document: text after the value")
	}
	for _, d := range diffs {
		if doc, err = applyDiff(doc, d); err != nil {
			return "", fmt.Errorf("%s at %s: %w", d.op, d.path, err)
		}
	}
	var out bytes.Buffer
	doc.render(&out)
	return out.String(), nil
}

// applyDiff applies one diff as MySQL does (apply_json_diff): replace the
// value at the path, insert one (a member, or an array element at the
// index, appended past the end), or remove it.
func applyDiff(doc *jsonNode, d rawDiff) (*jsonNode, error) {
	legs, err := parseJSONPath(d.path)
	if err != nil {
		return nil, err
	}
	var val *jsonNode
	if d.op != replication.JsonDiffOperationRemove {
		p := jsonParser{b: []byte(d.value)}
		if val, err = p.value(); err != nil {
			return nil, fmt.Errorf("reading the diff's value: %w", err)
		}
	}
	if len(legs) == 0 {
		if d.op == replication.JsonDiffOperationReplace {
			return val, nil
		}
		return nil, errors.New("only a replacement applies to the whole document")
	}
	parent := doc
	for _, l := range legs[:len(legs)-1] {
		if parent = parent.child(l); parent == nil {
			return nil, errors.New("the path is not in the document")
		}
	}
	last := legs[len(legs)-1]
	switch {
	case last.member && parent.isObj:
		i := parent.member(last.key)
		switch d.op {
		case replication.JsonDiffOperationReplace:
			if i < 0 {
				return nil, errors.New("no such member to replace")
			}
			parent.vals[i] = val
		case replication.JsonDiffOperationInsert:
			if i >= 0 {
				return nil, errors.New("the member to insert is there already")
			}
			parent.insertMember(last.key, val)
		default:
			if i < 0 {
				return nil, errors.New("no such member to remove")
			}
			parent.keys = slices.Delete(parent.keys, i, i+1)
			parent.vals = slices.Delete(parent.vals, i, i+1)
		}
	case !last.member && parent.isArr:
		n := len(parent.items)
		switch d.op {
		case replication.JsonDiffOperationReplace:
			if last.index >= n {
				return nil, errors.New("no such element to replace")
			}
			parent.items[last.index] = val
		case replication.JsonDiffOperationInsert:
			parent.items = slices.Insert(parent.items, min(last.index, n), val)
		default:
			if last.index >= n {
				return nil, errors.New("no such element to remove")
			}
			parent.items = slices.Delete(parent.items, last.index, last.index+1)
		}
	default:
		return nil, errors.New("the path's last step does not fit the value there")
	}
	return doc, nil
}

func (n *jsonNode) member(key string) int {
	for i, k := range n.keys {
		if k.name == key {
			return i
		}
	}
	return -1
}

func (n *jsonNode) child(l pathLeg) *jsonNode {
	switch {
	case l.member && n.isObj:
		if i := n.member(l.key); i >= 0 {
			return n.vals[i]
		}
	case !l.member && n.isArr && l.index < len(n.items):
		return n.items[l.index]
	}
	return nil
}

// insertMember adds a member where MySQL's binary format puts it:
// shorter keys first, then by bytes.
func (n *jsonNode) insertMember(key string, val *jsonNode) {
	at := len(n.keys)
	for i, k := range n.keys {
		if len(k.name) > len(key) || (len(k.name) == len(key) && k.name > key) {
			at = i
			break
		}
	}
	var raw bytes.Buffer
	writeMySQLJSONString(&raw, key)
	n.keys = slices.Insert(n.keys, at, jsonKey{name: key, raw: raw.Bytes()})
	n.vals = slices.Insert(n.vals, at, val)
}

func (n *jsonNode) render(out *bytes.Buffer) {
	switch {
	case n.isObj:
		out.WriteByte('{')
		for i, k := range n.keys {
			if i > 0 {
				out.WriteByte(',')
			}
			out.Write(k.raw)
			out.WriteByte(':')
			n.vals[i].render(out)
		}
		out.WriteByte('}')
	case n.isArr:
		out.WriteByte('[')
		for i, v := range n.items {
			if i > 0 {
				out.WriteByte(',')
			}
			v.render(out)
		}
		out.WriteByte(']')
	default:
		out.Write(n.raw)
	}
}

// writeMySQLJSONString writes s quoted as go-mysql's MySQL text mode does
// (writeJSONString there): control characters, '"' and '\' escaped, every
// other byte as it is.
func writeMySQLJSONString(out *bytes.Buffer, s string) {
	out.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '"':
			out.WriteString(`\"`)
		case '\\':
			out.WriteString(`\\`)
		case '\b':
			out.WriteString(`\b`)
		case '\f':
			out.WriteString(`\f`)
		case '\n':
			out.WriteString(`\n`)
		case '\r':
			out.WriteString(`\r`)
		case '\t':
			out.WriteString(`\t`)
		default:
			if c < 0x20 {
				fmt.Fprintf(out, `\u%04x`, c)
			} else {
				out.WriteByte(c)
			}
		}
	}
	out.WriteByte('"')
}

// jsonParser reads JSON text, keeping each scalar's text as it is.
type jsonParser struct {
	b []byte
	i int
}

func (p *jsonParser) skipSpace() {
	for p.i < len(p.b) && (p.b[p.i] == ' ' || p.b[p.i] == '\t' || p.b[p.i] == '\n' || p.b[p.i] == '\r') {
		p.i++
	}
}

func (p *jsonParser) value() (*jsonNode, error) {
	p.skipSpace()
	if p.i >= len(p.b) {
		return nil, errors.New("the text ends before a value")
	}
	switch p.b[p.i] {
	case '{':
		p.i++
		n := &jsonNode{isObj: true}
		for first := true; ; first = false {
			p.skipSpace()
			if p.i < len(p.b) && p.b[p.i] == '}' && first {
				p.i++
				return n, nil
			}
			start := p.i
			name, err := p.str()
			if err != nil {
				return nil, err
			}
			raw := p.b[start:p.i]
			p.skipSpace()
			if p.i >= len(p.b) || p.b[p.i] != ':' {
				return nil, errors.New("no ':' after a key")
			}
			p.i++
			v, err := p.value()
			if err != nil {
				return nil, err
			}
			n.keys = append(n.keys, jsonKey{name: name, raw: raw})
			n.vals = append(n.vals, v)
			p.skipSpace()
			if p.i < len(p.b) && p.b[p.i] == ',' {
				p.i++
				continue
			}
			if p.i < len(p.b) && p.b[p.i] == '}' {
				p.i++
				return n, nil
			}
			return nil, errors.New("an object not closed")
		}
	case '[':
		p.i++
		n := &jsonNode{isArr: true}
		for first := true; ; first = false {
			p.skipSpace()
			if p.i < len(p.b) && p.b[p.i] == ']' && first {
				p.i++
				return n, nil
			}
			v, err := p.value()
			if err != nil {
				return nil, err
			}
			n.items = append(n.items, v)
			p.skipSpace()
			if p.i < len(p.b) && p.b[p.i] == ',' {
				p.i++
				continue
			}
			if p.i < len(p.b) && p.b[p.i] == ']' {
				p.i++
				return n, nil
			}
			return nil, errors.New("an array not closed")
		}
	case '"':
		start := p.i
		if _, err := p.str(); err != nil {
			return nil, err
		}
		return &jsonNode{raw: p.b[start:p.i]}, nil
	default:
		start := p.i
		for p.i < len(p.b) && !strings.ContainsRune(",]} \t\n\r", rune(p.b[p.i])) {
			p.i++
		}
		if p.i == start {
			return nil, fmt.Errorf("unexpected %q", p.b[p.i])
		}
		return &jsonNode{raw: p.b[start:p.i]}, nil
	}
}

// str reads a quoted string and returns it decoded; bytes that are not
// escapes are taken as they are (MySQL's strings are byte-transparent).
func (p *jsonParser) str() (string, error) {
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return "", errors.New("a string expected")
	}
	p.i++
	var s []byte
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			return string(s), nil
		case c == '\\' && p.i+1 < len(p.b):
			e := p.b[p.i+1]
			p.i += 2
			switch e {
			case 'b':
				s = append(s, '\b')
			case 'f':
				s = append(s, '\f')
			case 'n':
				s = append(s, '\n')
			case 'r':
				s = append(s, '\r')
			case 't':
				s = append(s, '\t')
			case 'u':
				if p.i+4 > len(p.b) {
					return "", errors.New("a \\u escape cut short")
				}
				var r string
				if err := json.Unmarshal([]byte(`"\u`+string(p.b[p.i:p.i+4])+`"`), &r); err != nil {
					return "", err
				}
				s = append(s, r...)
				p.i += 4
			default:
				s = append(s, e)
			}
		default:
			s = append(s, c)
			p.i++
		}
	}
	return "", errors.New("a string not closed")
}

// pathLeg is one step of a JSON path: a member by key or an array element.
type pathLeg struct {
	member bool
	key    string
	index  int
}

// parseJSONPath reads a path as MySQL writes it in a diff
// (Json_path::to_string): "$", then ".key", `."quoted key"` or "[n]" steps.
func parseJSONPath(path string) ([]pathLeg, error) {
	if !strings.HasPrefix(path, "$") {
		return nil, fmt.Errorf("path %q does not start with $", path)
	}
	var legs []pathLeg
	for i := 1; i < len(path); {
		switch path[i] {
		case '.':
			i++
			if i < len(path) && path[i] == '"' {
				p := jsonParser{b: []byte(path), i: i}
				key, err := p.str()
				if err != nil {
					return nil, fmt.Errorf("path %q: %w", path, err)
				}
				legs = append(legs, pathLeg{member: true, key: key})
				i = p.i
				continue
			}
			j := i
			for j < len(path) && path[j] != '.' && path[j] != '[' {
				j++
			}
			if j == i || path[i:j] == "*" {
				return nil, fmt.Errorf("path %q: an empty or wildcard member", path)
			}
			legs = append(legs, pathLeg{member: true, key: path[i:j]})
			i = j
		case '[':
			j := strings.IndexByte(path[i:], ']')
			if j < 0 {
				return nil, fmt.Errorf("path %q: '[' not closed", path)
			}
			n, err := strconv.Atoi(strings.TrimSpace(path[i+1 : i+j]))
			if err != nil || n < 0 {
				return nil, fmt.Errorf("path %q: array step %q is not an index", path, path[i+1:i+j])
			}
			legs = append(legs, pathLeg{index: n})
			i += j + 1
		default:
			return nil, fmt.Errorf("path %q: unexpected %q", path, path[i])
		}
	}
	return legs, nil
}
