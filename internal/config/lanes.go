package config

import "fmt"

// MaxLanes bounds relay.lanes: each lane is a broker connection.
const MaxLanes = 64

// checkLanes refuses a lane count out of range and, with more than one
// lane, a table without a partition key: its rows would have no key to keep
// in order, and guessing one (the message id, or all in one lane) would
// silently give up an order the table had with one lane.
func (c *Config) checkLanes() []error {
	n := c.Relay.Lanes
	if n < 1 || n > MaxLanes {
		return []error{fmt.Errorf("relay.lanes: %d is not between 1 and %d", n, MaxLanes)}
	}
	if n == 1 {
		return nil
	}
	var errs []error
	for i, t := range c.Tables {
		if t.Route.PartitionKey == "" {
			errs = append(errs, fmt.Errorf("tables[%d].route.partition_key: required with relay.lanes: %d: the column or template "+
				"naming the rows' ordering key (e.g. {aggregate_id}); rows of one key keep their commit order. "+
				"Rows that need no order among themselves can use their message id column", i, n))
		}
	}
	return errs
}
