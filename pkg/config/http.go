package config

// HTTP configures the metrics and health endpoints (see internal/app/http.go).
type HTTP struct {
	// Addr is where /metrics, /healthz and /readyz listen; empty turns the
	// server off.
	Addr string `yaml:"addr"`
}
