// Package colval renders the column values the binlog reader and database/sql
// decode (strings, bytes, integers of every width, times) as text, bytes or
// numbers, and parses the "{column}" templates of a table's route. It is the
// one place that knows the Go types a row's values arrive in.
package colval
