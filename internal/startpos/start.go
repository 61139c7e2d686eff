package startpos

import (
	"context"
	"errors"

	"github.com/binlog-relay/binlog-relay/pkg/binlog"
	"github.com/binlog-relay/binlog-relay/pkg/checkpoint"
)

// Start is where the relay starts: the saved checkpoint, which it resumes
// (returned), or without one the source's current position (rows committed
// earlier are the sweeper's) and a nil checkpoint.
func Start(ctx context.Context, store checkpoint.Store, src Source) (binlog.Position, *checkpoint.Checkpoint, error) {
	cp, err := store.Load(ctx)
	if err == nil {
		return cp.Position(), &cp, nil
	}
	if !errors.Is(err, checkpoint.ErrNotFound) {
		return binlog.Position{}, nil, err
	}
	p, err := src.CurrentPosition(ctx)
	return p, nil, err
}
