package console

// The overview page's data (filled by internal/app from the relay's own
// state: nothing here queries a server) and its chart.

import (
	"fmt"
	"html/template"
	"strings"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/metrics"
)

// Overview is the relay as the overview page shows it.
type Overview struct {
	Name    string
	Version string
	Now     time.Time
	// Role is "leader", "standby" or "starting" (no binlog path yet).
	Role   string
	HA     bool
	Leader string // the lease holder, with ha.enabled
	Self   string // this relay's holder name, with ha.enabled
	Relays []Relay
	Ready  bool
	Why    []string // why not ready

	Source     Source
	Checkpoint Position
	Streamed   Position // the last whole transaction read
	Primary    Primary
	Lag        time.Duration

	BrokerConnected bool
	BrokerNodes     []string // URLs, password hidden
	Sweeper         Sweeper

	Recent []metrics.RecentPoint
	Errors []LogLine
}

// Relay is one relay of the name (ha.enabled): the leader or a standby.
type Relay struct {
	Holder string
	Role   string
	Seen   time.Duration // since its last roster write
}

// Source is the source replica.
type Source struct {
	Addr       string
	Connected  bool
	IsReplica  bool
	Threads    string // "IO thread Yes, SQL thread Yes" and errors
	Behind     string // Seconds_Behind_Master as read ("" unknown)
	Delay      time.Duration
	DelayKnown bool
}

// Position is a binlog position and, for a checkpoint, its age.
type Position struct {
	Have bool
	Text string
	Age  time.Duration
}

// Primary is what is known of the primary without polling it: the relay
// reads its position only while the replica is behind (invariant 6).
type Primary struct {
	Addr     string
	Position string
	Age      time.Duration // since it was read
	Note     string
}

// Sweeper is the sweeper's state.
type Sweeper struct {
	Enabled   bool
	Running   bool
	Interval  time.Duration
	LastRound time.Duration // since the last round; 0 before one
	LastDue   bool
	LastErr   string
	Precheck  string // where it asks: "source replica" or "primary (the replica is stopped or behind)"
}

// chart is an SVG polyline's points over the last hour, and its scale.
type chart struct {
	Points   string
	Failed   string
	Peak     string
	Unit     string
	HasData  bool
	From, To time.Time
}

const chartW, chartH = 360, 60

// charts draws throughput (rows a second, published and failed) and the
// mean publish-to-confirm latency, one x step per metrics.RecentStep.
func charts(pts []metrics.RecentPoint) (rate, latency chart) {
	if len(pts) == 0 {
		return
	}
	step := metrics.RecentStep.Seconds()
	var peakRate float64
	var peakLat time.Duration
	for _, p := range pts {
		peakRate = max(peakRate, float64(p.Published+p.Failed)/step)
		peakLat = max(peakLat, p.MeanConfirm)
	}
	line := func(v func(metrics.RecentPoint) float64, peak float64) string {
		var b strings.Builder
		for i, p := range pts {
			y := float64(chartH)
			if peak > 0 {
				y = chartH - v(p)/peak*(chartH-2)
			}
			fmt.Fprintf(&b, "%d,%.1f ", i*chartW/len(pts), y)
		}
		return strings.TrimSpace(b.String())
	}
	rate = chart{Points: line(func(p metrics.RecentPoint) float64 { return float64(p.Published) / step }, peakRate),
		Failed: line(func(p metrics.RecentPoint) float64 { return float64(p.Failed) / step }, peakRate),
		Peak:   fmt.Sprintf("%.1f", peakRate), Unit: "rows/s", HasData: peakRate > 0,
		From: pts[0].At, To: pts[len(pts)-1].At}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	latency = chart{Points: line(func(p metrics.RecentPoint) float64 { return ms(p.MeanConfirm) }, ms(peakLat)),
		Peak: fmt.Sprintf("%.1f", ms(peakLat)), Unit: "ms (mean publish to confirm)", HasData: peakLat > 0,
		From: pts[0].At, To: pts[len(pts)-1].At}
	return rate, latency
}

// svgChart renders c; the template escapes nothing it would need to:
// every value is a number or a fixed word.
func svgChart(c chart, title string) template.HTML {
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %d %d" role="img" aria-label="%s" preserveAspectRatio="none">`,
		chartW, chartH, template.HTMLEscapeString(title))
	fmt.Fprintf(&b, `<line x1="0" y1="%d" x2="%d" y2="%d" class="axis"/>`, chartH, chartW, chartH)
	if c.Points != "" {
		fmt.Fprintf(&b, `<polyline class="line" points="%s"/>`, c.Points)
	}
	if c.Failed != "" {
		fmt.Fprintf(&b, `<polyline class="line failed" points="%s"/>`, c.Failed)
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}
