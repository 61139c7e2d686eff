package outbox_test

import (
	"fmt"

	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// A preset is a known outbox layout; set where the table lives and validate
// it before handing it to a reader or router.
func ExamplePreset() {
	t, err := outbox.Preset("debezium")
	if err != nil {
		panic(err)
	}
	t.Schema = "shop"
	if err := t.Validate("tables[0]"); err != nil {
		panic(err)
	}
	fmt.Println(t.FullName(), t.Route.Exchange, t.Route.RoutingKey)
	// Output: shop.outbox {aggregatetype} {type}
}

// Validate names every problem by its configuration key.
func ExampleTable_Validate() {
	t := outbox.Table{Schema: "shop", Name: "outbox", Columns: outbox.Columns{ID: "id", Status: "state"},
		Statuses: outbox.Statuses{Publishable: []string{"NEW"}}, Route: outbox.Route{Exchange: "orders"}}
	fmt.Println(t.Validate("tables[0]"))
	// Output:
	// tables[0].columns.payload: required
	// tables[0].statuses.sent: required when columns.status is set
}

// IsPublishable tells whether an inserted row's status value asks to be sent.
func ExampleTable_IsPublishable() {
	t, _ := outbox.Preset("producer-message")
	fmt.Println(t.IsPublishable("PENDING"), t.IsPublishable([]byte("SENT")))
	// Output: true false
}
