package router_test

import (
	"fmt"

	"github.com/binlog-relay/binlog-relay/pkg/outbox"
	"github.com/binlog-relay/binlog-relay/pkg/router"
)

// Route turns a row, as the binlog reader decodes it, into the message the
// relay publishes.
func ExampleRouter_Route() {
	t, _ := outbox.Preset("debezium")
	t.Schema = "shop"
	if err := t.Validate("shop"); err != nil {
		panic(err)
	}
	rt, err := router.New([]*outbox.Table{&t}, router.WithAppID("orders-relay"))
	if err != nil {
		panic(err)
	}
	row := &outbox.Row{Table: &t, ID: "7c0f", Values: map[string]any{
		"id": "7c0f", "aggregatetype": "order", "aggregateid": "o-42", "type": "OrderCreated",
		"payload": []byte(`{"total":12.5}`)}}
	m, err := rt.Route(row)
	if err != nil {
		panic(err)
	}
	fmt.Println(m.Exchange, m.RoutingKey, m.Publishing.MessageId, m.Publishing.AppId)
	fmt.Println(m.Publishing.Headers["aggregateid"], string(m.Publishing.Body))
	// Output:
	// order OrderCreated 7c0f orders-relay
	// o-42 {"total":12.5}
}

// A row whose route column is NULL cannot be published; the error says so.
func ExampleRouter_Route_nullRoute() {
	t, _ := outbox.Preset("debezium")
	t.Schema = "shop"
	_ = t.Validate("shop")
	rt, _ := router.New([]*outbox.Table{&t})
	_, err := rt.Route(&outbox.Row{Table: &t, ID: "1", Values: map[string]any{"id": "1", "aggregatetype": nil, "type": "x", "payload": []byte("{}")}})
	fmt.Println(err)
	// Output: no route: exchange column "aggregatetype" is NULL or missing (required column is NULL)
}
