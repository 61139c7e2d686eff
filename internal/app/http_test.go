package app

import (
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/internal/lanes"
	"github.com/binlog-relay/binlog-relay/internal/publisher"
	"github.com/binlog-relay/binlog-relay/internal/source"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
)

func TestReadyzReasonsNameEachConnection(t *testing.T) {
	cfg := &config.Config{
		Source: config.MySQL{Host: "replica.test", Port: 3306},
		Broker: config.Broker{URL: "amqp://relay:s3cret@rabbit.test:5672/"},
		Redis:  config.Redis{Addr: "redis.test:6379"},
	}
	a := &App{Cfg: cfg, Log: zap.NewNop(), Source: testSource(t, cfg)}
	if ok, why := a.Ready(); ok || len(why) != 1 || !strings.Contains(why[0], "not running yet") {
		t.Fatalf("before build: %v %v", ok, why)
	}
	r, err := binlog.New(binlog.Config{Host: "replica.test", Port: 3306, User: "relay", Flavor: binlog.FlavorMariaDB}, nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := publisher.New(publisher.Config{URL: cfg.Broker.URL}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	a.watch(r, lanes.Set{p})
	ok, why := a.Ready()
	text := strings.Join(why, "; ")
	if ok || len(why) != 3 {
		t.Fatalf("nothing connected, yet: %v %q", ok, text)
	}
	for _, want := range []string{"source replica.test:3306", "broker amqp://relay:xxxxx@rabbit.test:5672/", "redis redis.test:6379"} {
		if !strings.Contains(text, want) {
			t.Errorf("reasons %q lack %q", text, want)
		}
	}
	if strings.Contains(text, "s3cret") {
		t.Errorf("reasons carry the password: %s", text)
	}
}

// testSource is the config's source, opened (nothing dials until used).
func testSource(t *testing.T, cfg *config.Config) *source.Source {
	t.Helper()
	src, err := source.Open(cfg.Source, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	return src
}
