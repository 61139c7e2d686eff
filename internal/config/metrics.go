package config

import "fmt"

// DefaultMaxLabelValues is metrics.max_label_values when unset.
const DefaultMaxLabelValues = 100

// Metrics bounds what row data can do to the metrics.
type Metrics struct {
	// MaxLabelValues is the most distinct values a label fed from row data
	// (exchange) takes; later values are counted under "other", so an
	// exchange column holding ids cannot put thousands of series on every
	// scrape.
	MaxLabelValues int `yaml:"max_label_values"`
}

// Validate names the field at fault.
func (m Metrics) Validate() error {
	if m.MaxLabelValues < 1 {
		return fmt.Errorf("metrics.max_label_values: %d must be at least 1", m.MaxLabelValues)
	}
	return nil
}
