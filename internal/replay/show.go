package replay

import (
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"
)

// showProgress reports the run until the returned func is called: a bar
// redrawn on a terminal (rows, rate, ETA), a log line every ProgressEvery
// otherwise.
func (r *Replayer) showProgress(began time.Time) (stop func()) {
	every := r.cfg.ProgressEvery
	if r.term {
		every = 250 * time.Millisecond
	}
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				if r.term {
					fmt.Fprintf(r.out, "\r%s\n", r.bar(began))
				}
				return
			case <-t.C:
				if r.term {
					fmt.Fprintf(r.out, "\r%s", r.bar(began))
					continue
				}
				n, total, rate, eta := r.figures(began)
				r.log.Info("replay progress", zap.String("replay", r.st.ID), zap.String("table", r.cfg.Table.FullName()),
					zap.Int64("rows_done", n), zap.Int64("rows_total", total), zap.Int64("failed", r.failed.Load()),
					zap.Float64("rows_per_second", rate), zap.Duration("eta", eta))
			}
		}
	}()
	return func() { close(done); <-stopped }
}

// figures are the rows settled (over resumed runs too), the total, this
// run's rate and the time left at that rate.
func (r *Replayer) figures(began time.Time) (n, total int64, rate float64, eta time.Duration) {
	n, total = r.published.Load()+r.failed.Load(), r.st.Total
	if s := time.Since(began).Seconds(); s > 0 {
		rate = float64(r.settled.Load()) / s
	}
	if rate > 0 && total > n {
		eta = time.Duration(float64(total-n) / rate * float64(time.Second)).Round(time.Second)
	}
	return n, total, rate, eta
}

func (r *Replayer) bar(began time.Time) string {
	const width = 30
	n, total, rate, eta := r.figures(began)
	frac := 1.0
	if total > 0 {
		frac = min(float64(n)/float64(total), 1)
	}
	full := int(frac * width)
	return fmt.Sprintf("[%s%s] %d/%d %5.1f%%  %.0f rows/s  ETA %s  failed %d", strings.Repeat("#", full), strings.Repeat(".", width-full),
		n, total, 100*frac, rate, eta, r.failed.Load())
}
