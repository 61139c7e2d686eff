package outbox

import (
	"errors"
	"fmt"
	"slices"
)

// checkLifecycle refuses status values that would make some lifecycle write
// meaningless or invalid SQL: every write the relay and the sweeper make
// (SENT marks, retry and FAILED, claim, zombie reset, requeue, archive)
// needs a value to write, and the values must tell the states apart. field
// is the YAML path of the statuses block.
func (s *Statuses) checkLifecycle(field string) error {
	var errs []error
	if len(s.Publishable) > 0 && s.RetryValue() == "" {
		errs = append(errs, fmt.Errorf("%s.pending: required: a failed publish, a zombie reset and a requeue put the row back to it, and no publishable value other than statuses.sending can stand in", field))
	}
	if s.Sent != "" && slices.Contains(s.Publishable, s.Sent) {
		errs = append(errs, fmt.Errorf("%s.sent: %q is also in statuses.publishable: a row marked sent would be published again", field, s.Sent))
	}
	if s.Failed != "" && slices.Contains(s.Publishable, s.Failed) {
		errs = append(errs, fmt.Errorf("%s.failed: %q is also in statuses.publishable: a failed row would be published again", field, s.Failed))
	}
	named := []struct{ name, v string }{{"pending", s.Pending}, {"sending", s.Sending}, {"sent", s.Sent}, {"failed", s.Failed}}
	for i, a := range named {
		for _, b := range named[i+1:] {
			if a.v != "" && a.v == b.v {
				errs = append(errs, fmt.Errorf("%s.%s: %q is also statuses.%s: each state needs its own value", field, b.name, b.v, a.name))
			}
		}
	}
	return errors.Join(errs...)
}
