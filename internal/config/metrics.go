package config

import "fmt"

// Metrics bounds what row data can do to the metrics.
type Metrics struct {
	// MaxLabelValues is the most distinct values a label fed from row data
	// (exchange) takes; later values are counted under "other", so an
	// exchange column holding ids cannot put thousands of series on every
	// scrape. 0 means the metrics' default (100).
	MaxLabelValues int `yaml:"max_label_values"`
}

// Validate names the field at fault.
func (m Metrics) Validate() error {
	if m.MaxLabelValues < 0 {
		return fmt.Errorf("metrics.max_label_values: %d must be at least 1", m.MaxLabelValues)
	}
	return nil
}
