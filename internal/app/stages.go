package app

import (
	"errors"
	"strings"

	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/internal/lease"
	"github.com/binlog-relay/binlog-relay/internal/publisher"
	"github.com/binlog-relay/binlog-relay/internal/relay"
	"github.com/binlog-relay/binlog-relay/internal/rowstatus"
	"github.com/binlog-relay/binlog-relay/internal/sweeper"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
)

// The config leaves a key a stage owns at zero; newStages turns its
// sections into the stages' Configs, with the stages' own defaults filled
// in, once: Open keeps them on the App, and every stage is built from them.

// stages are the stage Configs of one config.
type stages struct {
	sweeper sweeper.Config
	lease   lease.Config
	// relay is the pipeline's Config minus what only a run knows (the
	// server identity, the observer, the guard).
	relay relay.Config
	// publisher is the publishers' Config minus what each publisher sets
	// (its TLS config, connection name and ordering).
	publisher publisher.Config
	retry     rowstatus.Retry // retry:, the status writer's backoff
	// reader is the binlog reader's Config minus what only a run knows
	// (the flavor, the sign-in, TLS). Its zero fields stay zero: the
	// reader's Defaults picks a random server_id, at each start.
	reader binlog.Config
}

// newStages converts cfg and validates each stage's Config, so a value
// only a stage checks is refused before anything connects (Open) and by
// lint, naming its YAML key as the stage does. The Configs come back with
// the error too (a test may read one of an incomplete config).
func newStages(cfg *config.Config) (stages, error) {
	s := stages{sweeper: sweeperConfig(cfg.Sweeper), lease: leaseConfig(cfg), relay: relayConfig(cfg),
		retry: retryBackoff(cfg)}
	s.publisher = publisher.Config{URL: cfg.Broker.URL, URLs: cfg.Broker.URLs, Window: cfg.Broker.Window,
		HoldBackoff:    holdBackoff(cfg.Relay.HoldBackoff, s.retry),
		MaxMessageSize: cfg.Broker.MaxMessageBytes, DeadLetterExchange: cfg.Broker.DeadLetterExchange}
	s.publisher.Defaults()
	s.reader = readerConfig(cfg)
	return s, errors.Join(validateReader(s.reader), s.sweeper.Validate(), s.lease.Validate(), s.relay.Validate(), s.publisher.Validate())
}

func readerConfig(cfg *config.Config) binlog.Config {
	return binlog.Config{Host: cfg.Source.Host, Port: uint16(cfg.Source.Port), User: cfg.Source.User,
		ServerID: cfg.Source.ServerID, Heartbeat: cfg.Relay.Heartbeat,
		XABufferRows: cfg.Source.XABufferRows, XABufferBytes: cfg.Source.XABufferBytes}
}

// readerKeys names the reader's Config fields by their YAML keys: pkg/binlog
// is a library, whose errors name its Go fields.
var readerKeys = strings.NewReplacer(
	"binlog: Config.Host:", "source.host:", "binlog: Config.Port:", "source.port:",
	"binlog: Config.User:", "source.user:",
	"binlog: Config.XABufferRows:", "source.xa_buffer_rows:", "binlog: Config.XABufferBytes:", "source.xa_buffer_bytes:")

// validateReader is the reader's own Validate over c with its defaults,
// its errors named by their YAML keys. The flavor is read from the server
// at start; either one validates the rest alike.
func validateReader(c binlog.Config) error {
	c.Defaults()
	c.Flavor = binlog.FlavorMySQL
	if err := c.Validate(); err != nil {
		return errors.New(readerKeys.Replace(err.Error()))
	}
	return nil
}

func sweeperConfig(s config.Sweeper) sweeper.Config {
	c := sweeper.Config{Interval: s.Interval, GracePeriod: s.GracePeriod, BatchSize: s.BatchSize,
		ZombieTimeout: s.ZombieTimeout, Archive: sweeper.Archive(s.Archive)}
	c.Defaults()
	return c
}

func leaseConfig(cfg *config.Config) lease.Config {
	c := lease.Config{Name: cfg.Name, TTL: cfg.HA.LeaseTTL, Keys: cfg.RedisKeys()}
	if cfg.HA.Enabled { // checked only where there is a lease to wait for
		c.WaitReplicas, c.WaitTimeout = cfg.Redis.WaitReplicas, cfg.Redis.WaitTimeout
	}
	c.Defaults()
	return c
}

func relayConfig(cfg *config.Config) relay.Config {
	c := relay.Config{BatchSize: cfg.Relay.BatchSize, FlushInterval: cfg.Relay.FlushInterval, MaxUnmarked: cfg.Relay.MaxUnmarked,
		MarkSessions:       cfg.Relay.MarkSessions,
		CheckpointInterval: cfg.Checkpoint.Interval, Buffer: cfg.Relay.Buffer, DrainTimeout: cfg.Relay.DrainTimeout,
		StoreOutageWindow: cfg.Checkpoint.OutageWindow, MaxInflightBytes: cfg.Relay.MaxInflightBytes,
		DeadLetterExchange: cfg.Broker.DeadLetterExchange}
	c.Defaults()
	return c
}

func retryBackoff(cfg *config.Config) rowstatus.Retry {
	r := cfg.Retry
	b := rowstatus.Retry{Base: r.Base, Max: r.Max, Factor: r.Factor, Jitter: r.Jitter}
	b.Defaults()
	return b
}

// holdBackoff is relay.hold_backoff, each unset bound following retry:
// (their shared value before hold_backoff had a key of its own).
func holdBackoff(h config.HoldBackoff, retry rowstatus.Retry) publisher.HoldBackoff {
	b := publisher.HoldBackoff{Base: h.Base, Max: h.Max}
	if b.Max == 0 {
		b.Max = retry.Max
	}
	if b.Base == 0 {
		b.Base = min(retry.Base, b.Max)
	}
	return b
}

// checkStages is newStages for lint (ConfigChecks): the error alone.
func checkStages(cfg *config.Config) error {
	_, err := newStages(cfg)
	return err
}
