package console

// The last errors: a zap core beside the relay's own that keeps its last
// warnings and errors in memory for the overview page. The relay's log
// lines carry no secret (STYLE.md), so neither does this.

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// LogLine is one warning or error the relay logged.
type LogLine struct {
	At      time.Time
	Level   string
	Logger  string
	Message string
	Fields  string
}

// keepLines is how many lines the recorder keeps.
const keepLines = 20

// Recorder keeps the last warnings and errors logged through its Core.
type Recorder struct {
	mu    sync.Mutex
	lines []LogLine
}

// Lines returns the kept lines, newest first.
func (r *Recorder) Lines() []LogLine {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]LogLine, len(r.lines))
	for i, l := range r.lines {
		out[len(r.lines)-1-i] = l
	}
	return out
}

func (r *Recorder) add(l LogLine) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.lines) == keepLines {
		copy(r.lines, r.lines[1:])
		r.lines = r.lines[:keepLines-1]
	}
	r.lines = append(r.lines, l)
}

// Tee returns log with r keeping its warnings and errors as well.
func (r *Recorder) Tee(log *zap.Logger) *zap.Logger {
	return log.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return zapcore.NewTee(c, &recorderCore{r: r})
	}))
}

type recorderCore struct {
	r      *Recorder
	fields []zapcore.Field
}

func (c *recorderCore) Enabled(l zapcore.Level) bool { return l >= zapcore.WarnLevel }

func (c *recorderCore) With(fs []zapcore.Field) zapcore.Core {
	return &recorderCore{r: c.r, fields: append(append([]zapcore.Field(nil), c.fields...), fs...)}
}

func (c *recorderCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *recorderCore) Write(e zapcore.Entry, fs []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range append(append([]zapcore.Field(nil), c.fields...), fs...) {
		f.AddTo(enc)
	}
	keys := make([]string, 0, len(enc.Fields))
	for k := range enc.Fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		v := fmt.Sprint(enc.Fields[k])
		if len(v) > 300 {
			v = v[:300] + "…"
		}
		parts = append(parts, k+"="+v)
	}
	c.r.add(LogLine{At: e.Time, Level: e.Level.String(), Logger: e.LoggerName, Message: e.Message, Fields: strings.Join(parts, " ")})
	return nil
}

func (c *recorderCore) Sync() error { return nil }
