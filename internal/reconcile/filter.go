package reconcile

import (
	"slices"
	"strings"
)

// filter is what a consumer should get: messages to one of exchanges (any
// when empty) whose routing key matches one of keys (any when empty).
type filter struct {
	exchanges []string
	keys      [][]string // binding patterns, split into words
}

func newFilter(exchanges, keys []string) filter {
	f := filter{exchanges: exchanges}
	for _, k := range keys {
		f.keys = append(f.keys, strings.Split(k, "."))
	}
	return f
}

// any reports whether the filter lets every message through, so rows need
// not be routed to be checked.
func (f filter) any() bool { return len(f.exchanges) == 0 && len(f.keys) == 0 }

func (f filter) match(exchange, routingKey string) bool {
	if len(f.exchanges) > 0 && !slices.Contains(f.exchanges, exchange) {
		return false
	}
	if len(f.keys) == 0 {
		return true
	}
	words := strings.Split(routingKey, ".")
	for _, k := range f.keys {
		if topicMatch(k, words) {
			return true
		}
	}
	return false
}

// topicMatch matches a routing key against a binding pattern the way a
// topic exchange does: words are separated by dots, * stands for exactly
// one word and # for zero or more.
func topicMatch(pattern, words []string) bool {
	if len(pattern) == 0 {
		return len(words) == 0
	}
	switch pattern[0] {
	case "#":
		for i := 0; i <= len(words); i++ {
			if topicMatch(pattern[1:], words[i:]) {
				return true
			}
		}
		return false
	case "*":
		return len(words) > 0 && topicMatch(pattern[1:], words[1:])
	default:
		return len(words) > 0 && words[0] == pattern[0] && topicMatch(pattern[1:], words[1:])
	}
}
