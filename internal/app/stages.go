package app

import (
	"errors"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/internal/lease"
	"github.com/binlog-relay/binlog-relay/internal/publisher"
	"github.com/binlog-relay/binlog-relay/internal/relay"
	"github.com/binlog-relay/binlog-relay/internal/status"
	"github.com/binlog-relay/binlog-relay/internal/sweeper"
)

// The config leaves a key a stage owns at zero; these turn its sections into
// the stages' Configs, with the stages' own defaults filled in.

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

// relayConfig is the pipeline's Config minus what only a run knows (the
// server identity, the observer, the guard).
func relayConfig(cfg *config.Config) relay.Config {
	c := relay.Config{BatchSize: cfg.Relay.BatchSize, FlushInterval: cfg.Relay.FlushInterval,
		CheckpointInterval: cfg.Checkpoint.Interval, Buffer: cfg.Relay.Buffer, DrainTimeout: cfg.Relay.DrainTimeout,
		StoreOutageWindow: cfg.Checkpoint.OutageWindow, MaxInflightBytes: cfg.Relay.MaxInflightBytes,
		DeadLetterExchange: cfg.Broker.DeadLetterExchange}
	c.Defaults()
	return c
}

func retryBackoff(cfg *config.Config) status.Backoff {
	r := cfg.Retry
	b := status.Backoff{Base: r.Base, Max: r.Max, Factor: r.Factor, Jitter: r.Jitter}
	b.Defaults()
	return b
}

// holdBackoff is relay.hold_backoff, each unset bound following retry:
// (their shared value before hold_backoff had a key of its own).
func holdBackoff(cfg *config.Config) (base, max time.Duration) {
	retry := retryBackoff(cfg)
	base, max = cfg.Relay.HoldBackoff.Base, cfg.Relay.HoldBackoff.Max
	if max == 0 {
		max = retry.Max
	}
	if base == 0 {
		base = min(retry.Base, max)
	}
	return base, max
}

// publisherConfig is the publishers' Config minus what each publisher sets
// (its TLS config, connection name and ordering).
func publisherConfig(cfg *config.Config) publisher.Config {
	holdMin, holdMax := holdBackoff(cfg)
	return publisher.Config{URL: cfg.Broker.URL, URLs: cfg.Broker.URLs, Window: cfg.Broker.Window,
		StrictRetryMin: holdMin, StrictRetryMax: holdMax,
		MaxMessageSize: cfg.Broker.MaxMessageBytes, DeadLetterExchange: cfg.Broker.DeadLetterExchange}
}

// checkStages validates the stage Configs built from the config, so a value
// only a stage checks is refused before anything connects (Open) and by
// lint, naming its YAML key as the stage does.
func checkStages(cfg *config.Config) error {
	sc, lc, rc, pc := sweeperConfig(cfg.Sweeper), leaseConfig(cfg), relayConfig(cfg), publisherConfig(cfg)
	pc.Defaults()
	return errors.Join(sc.Validate(), lc.Validate(), rc.Validate(), pc.Validate())
}
