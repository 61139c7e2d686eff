package inbox

import (
	"errors"
	"fmt"
)

// ErrMalformed marks a message that can never be handled (a body that does not parse,
// a required field missing). The inbox records it FAILED at once instead of retrying.
var ErrMalformed = errors.New("malformed message")

// Malformed wraps err so that errors.Is(err, ErrMalformed) holds. A handler returns
// Malformed(err) for a body it rejects; the reason is kept in error_msg.
func Malformed(err error) error {
	if err == nil {
		return ErrMalformed
	}
	return &malformedError{err: err}
}

type malformedError struct{ err error }

func (e *malformedError) Error() string { return "malformed message: " + e.err.Error() }

// Is makes errors.Is(e, ErrMalformed) true while keeping the cause reachable through
// Unwrap.
func (e *malformedError) Is(target error) bool { return target == ErrMalformed }
func (e *malformedError) Unwrap() error        { return e.err }

// panicError is what a handler panic becomes: the message is retried like any other
// failure and the worker keeps consuming.
type panicError struct{ value any }

func (e *panicError) Error() string { return fmt.Sprintf("handler panicked: %v", e.value) }
