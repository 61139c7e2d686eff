package metrics

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"go.uber.org/zap"
)

// Queues reads the depth of RabbitMQ queues from the management API
// (GET /api/queues/{vhost}/{name}) on an interval. The management plugin
// must be enabled on the broker (rabbitmq-plugins enable rabbitmq_management);
// the user needs the "monitoring" tag (or "management" and access to the
// vhost). VHost and Interval are http.vhost and http.queue_interval, which
// the config fills when unset.
type Queues struct {
	// URL is the management API base, e.g. http://user:pass@host:15672. The
	// credentials are sent as basic auth, never logged.
	URL      string
	VHost    string
	Names    []string
	Interval time.Duration
	TLS      *tls.Config
	Metrics  *Metrics
	Log      *zap.Logger
}

// queueInfo is the part of the management API's queue object used here.
type queueInfo struct {
	Messages               float64 `json:"messages"`
	MessagesReady          float64 `json:"messages_ready"`
	MessagesUnacknowledged float64 `json:"messages_unacknowledged"`
	Consumers              float64 `json:"consumers"`
}

// Run polls until ctx ends. The first poll is immediate.
func (q *Queues) Run(ctx context.Context) error {
	if len(q.Names) == 0 {
		return nil
	}
	base, user, pass, err := splitCredentials(q.URL)
	if err != nil {
		return err
	}
	vhost, interval := q.VHost, q.Interval
	if vhost == "" || interval <= 0 {
		return fmt.Errorf("queue depth: vhost %q and interval %s must be set", vhost, interval)
	}
	client := &http.Client{Timeout: max(interval, 5*time.Second),
		Transport: &http.Transport{TLSClientConfig: q.TLS, Proxy: nil}}
	defer client.CloseIdleConnections()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	failing := false
	for {
		var firstErr error
		for _, name := range q.Names {
			info, err := fetchQueue(ctx, client, base, user, pass, vhost, name)
			if ctx.Err() != nil {
				return nil
			}
			if err != nil {
				q.Metrics.queueErrors.Inc()
				if firstErr == nil {
					firstErr = err
				}
				continue
			}
			q.Metrics.queueMessages.WithLabelValues(vhost, name).Set(info.Messages)
			q.Metrics.queueReady.WithLabelValues(vhost, name).Set(info.MessagesReady)
			q.Metrics.queueUnacked.WithLabelValues(vhost, name).Set(info.MessagesUnacknowledged)
			q.Metrics.queueConsumer.WithLabelValues(vhost, name).Set(info.Consumers)
		}
		switch {
		case firstErr != nil && !failing:
			q.Log.Warn("RabbitMQ management API query failed; queue depth gauges are stale until it works",
				zap.String("management_url", base), zap.Error(firstErr))
			failing = true
		case firstErr == nil && failing:
			q.Log.Info("RabbitMQ management API answers again", zap.String("management_url", base))
			failing = false
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// splitCredentials takes the user info out of the URL, so neither a request
// error nor a log line can carry the password.
func splitCredentials(raw string) (base, user, pass string, err error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", "", "", errors.New("management URL: not an http:// or https:// URL")
	}
	if u.User != nil {
		user = u.User.Username()
		pass, _ = u.User.Password()
		u.User = nil
	}
	return strings.TrimRight(u.String(), "/"), user, pass, nil
}

func fetchQueue(ctx context.Context, client *http.Client, base, user, pass, vhost, name string) (queueInfo, error) {
	var info queueInfo
	u := base + "/api/queues/" + url.PathEscape(vhost) + "/" + url.PathEscape(name)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return info, err
	}
	if user != "" {
		req.SetBasicAuth(user, pass)
	}
	resp, err := client.Do(req)
	if err != nil {
		return info, fmt.Errorf("queue %q: %w", name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return info, fmt.Errorf("queue %q: management API answered %s", name, resp.Status)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&info); err != nil {
		return info, fmt.Errorf("queue %q: decoding the management API's answer: %w", name, err)
	}
	return info, nil
}
