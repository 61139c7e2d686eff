package metrics

import (
	"sync"

	"go.uber.org/zap"
)

// DefaultMaxLabelValues is how many distinct values a label whose values
// come from row data may take when the config does not say
// (metrics.max_label_values).
const DefaultMaxLabelValues = 100

// OtherLabelValue is the value counted for every value past the bound.
const OtherLabelValue = "other"

// labelLimit bounds one label whose values come from row data (the exchange
// a row names, or a template filled from a column): every distinct value is
// a series on every scrape for as long as the process lives, so a column
// holding ids would grow the scrape, and Prometheus, without end. The first
// max values are admitted and keep their own series; later ones are counted
// under "other". Admitted values are never evicted: a counter that moved to
// "other" half way would make both series lie about their rate.
type labelLimit struct {
	label string
	max   int
	log   *zap.Logger

	mu       sync.RWMutex
	admitted map[string]struct{}
	warned   bool
}

func newLabelLimit(label string, max int, log *zap.Logger) *labelLimit {
	return &labelLimit{label: label, max: max, log: log, admitted: make(map[string]struct{}, max)}
}

// value is the label value to count v under: v itself while it is one of
// the first max values seen (and always for "", which means "no value", not
// a value from a row), otherwise "other". The first value turned away is
// logged, once, with the label's name.
func (l *labelLimit) value(v string) string {
	if v == "" {
		return v
	}
	l.mu.RLock()
	_, ok := l.admitted[v]
	l.mu.RUnlock()
	if ok {
		return v
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.admitted[v]; ok {
		return v
	}
	if len(l.admitted) < l.max {
		l.admitted[v] = struct{}{}
		return v
	}
	if !l.warned {
		l.warned = true
		l.log.Warn("metric label reached its bound of distinct values; further values are counted under \"other\"",
			zap.String("label", l.label), zap.Int("max_label_values", l.max), zap.String("first_value_over", v))
	}
	return OtherLabelValue
}

// size is how many values are admitted (for tests of the bound).
func (l *labelLimit) size() int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return len(l.admitted)
}
