package config

import "fmt"

// Metrics bounds what row data can do to the metrics.
type Metrics struct {
	// MaxLabelValues is the most distinct values a label fed from row data
	// (exchange) takes; later values are counted under "other", so an
	// exchange column holding ids cannot put thousands of series on every
	// scrape. 0 means the metrics' default (100).
	MaxLabelValues int `yaml:"max_label_values"`
	// MaxTableSeries is how many tables matched by pattern entries keep
	// per-table series (the table label); the per-table metrics of later
	// ones are counted under their entry's pattern, so 1,000 tenant tables
	// do not put 1,000 series on every per-table metric. Tables named in
	// the config always keep their own. 0 means the metrics' default (100).
	MaxTableSeries int `yaml:"max_table_series"`
}

// Validate names the field at fault.
func (m Metrics) Validate() error {
	if m.MaxLabelValues < 0 {
		return fmt.Errorf("metrics.max_label_values: %d must be at least 1", m.MaxLabelValues)
	}
	if m.MaxTableSeries < 0 {
		return fmt.Errorf("metrics.max_table_series: %d must be at least 1", m.MaxTableSeries)
	}
	return nil
}
