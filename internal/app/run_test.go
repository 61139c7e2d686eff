package app

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/binlog-relay/binlog-relay/pkg/binlog"
)

// The reader's XA bound reaches the operator with the configuration keys
// that set it, and stays recognisable as the reader's error.
func TestXABoundHintNamesTheKeys(t *testing.T) {
	err := xaBoundHint(fmt.Errorf("%w: XA transaction x'31' holds more outbox rows than the reader may keep", binlog.ErrXABufferFull))
	if !errors.Is(err, binlog.ErrXABufferFull) || !strings.Contains(err.Error(), "source.xa_buffer_rows / source.xa_buffer_bytes") ||
		!strings.Contains(err.Error(), "x'31'") {
		t.Fatalf("%v", err)
	}
}
