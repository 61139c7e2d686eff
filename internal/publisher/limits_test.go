package publisher

import (
	"errors"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

// What RabbitMQ refuses per message with 406 PRECONDITION_FAILED (and a
// closed channel) is refused here before sending, naming the field.
func TestCheckLimitsBrokerRules(t *testing.T) {
	cases := []struct {
		name string
		pub  amqp.Publishing
		want string // "" means accepted
	}{
		{"CC array of strings", amqp.Publishing{Headers: amqp.Table{"CC": []any{"a.b", "c"}}}, ""},
		{"BCC array of strings", amqp.Publishing{Headers: amqp.Table{"BCC": []any{"x"}}}, ""},
		{"empty CC array", amqp.Publishing{Headers: amqp.Table{"CC": []any{}}}, ""},
		{"lower-case cc is an ordinary header", amqp.Publishing{Headers: amqp.Table{"cc": "a"}}, ""},
		{"CC string", amqp.Publishing{Headers: amqp.Table{"CC": "a.b"}}, "header CC is string"},
		{"BCC number", amqp.Publishing{Headers: amqp.Table{"BCC": int64(5)}}, "header BCC is int64"},
		{"CC table", amqp.Publishing{Headers: amqp.Table{"CC": amqp.Table{"a": "b"}}}, "header CC is amqp091.Table"},
		{"CC element not a string", amqp.Publishing{Headers: amqp.Table{"CC": []any{"a", int32(1)}}}, "header CC element 1 is int32"},
		{"CC element bytes", amqp.Publishing{Headers: amqp.Table{"CC": []any{[]byte("a")}}}, "header CC element 0 is []uint8"},
		{"expiration zero", amqp.Publishing{Expiration: "0"}, ""},
		{"expiration max", amqp.Publishing{Expiration: "4294967295"}, ""},
		{"expiration negative", amqp.Publishing{Expiration: "-1"}, `expiration "-1"`},
		{"expiration too large", amqp.Publishing{Expiration: "4294967296"}, `expiration "4294967296"`},
		{"expiration not a number", amqp.Publishing{Expiration: "60s"}, `expiration "60s"`},
		{"expiration with sign", amqp.Publishing{Expiration: "+5"}, `expiration "+5"`},
		{"expiration with space", amqp.Publishing{Expiration: " 5"}, `expiration " 5"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := checkLimits("ex", "k", &c.pub, 131072, 1<<20)
			if c.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want ErrRefused naming %q", err, c.want)
			}
			if !strings.Contains(err.Error(), "not sent") {
				t.Errorf("error %q does not say the message was not sent", err)
			}
		})
	}
}

// The broker's default max_message_size follows the version it announces.
func TestDefaultMaxMessageSizeByVersion(t *testing.T) {
	for _, c := range []struct {
		version string
		want    int
	}{{"3.10.8", 128 << 20}, {"3.13.7", 128 << 20}, {"4.0.1", 16 << 20}, {"4.3.6", 16 << 20}, {"10.0.0", 16 << 20}, {"", 128 << 20}, {"x", 128 << 20}} {
		if got := defaultMaxMessageSize(c.version); got != c.want {
			t.Errorf("defaultMaxMessageSize(%q) = %d, want %d", c.version, got, c.want)
		}
	}
}
