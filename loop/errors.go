package loop

import (
	"errors"
	"fmt"

	"github.com/agentfleet/fleet/fleettype"
)

// ErrOverloaded is returned (wrapped) by a Model that is temporarily unable
// to serve: rate limited, queue full, 429/503. The loop backs off with
// jitter and retries.
var ErrOverloaded = errors.New("model overloaded")

// ErrInvalidResponse is matched by every invalid-model-output error.
var ErrInvalidResponse = errors.New("invalid model response")

// InvalidResponseKind says what was wrong with a model's output.
type InvalidResponseKind string

// Invalid response kinds.
const (
	// InvalidEmpty: no text and no calls.
	InvalidEmpty InvalidResponseKind = "empty"
	// InvalidMalformedCall: a call that did not parse (bad syntax, arguments
	// that are not a JSON object, no name).
	InvalidMalformedCall InvalidResponseKind = "malformed_call"
	// InvalidTruncated: generation hit the token limit inside a call.
	InvalidTruncated InvalidResponseKind = "truncated"
)

// InvalidResponseError is returned by a Model (or raised by the loop) when
// the model's output is unusable. It matches ErrInvalidResponse.
type InvalidResponseError struct {
	Kind InvalidResponseKind
	// Detail explains the problem; it is shown to the model in the
	// corrective message.
	Detail string
	// Raw is the model's raw output, capped.
	Raw string
	// Usage is what producing the unusable answer cost (the loop adds it to
	// the run's usage like a valid answer's).
	Usage fleettype.Usage
}

// Error implements error.
func (e *InvalidResponseError) Error() string {
	return fmt.Sprintf("invalid model response (%s): %s", e.Kind, e.Detail)
}

// Is makes errors.Is(err, ErrInvalidResponse) true.
func (e *InvalidResponseError) Is(target error) bool { return target == ErrInvalidResponse }

// ErrInvalidConfig is wrapped by Config validation errors.
var ErrInvalidConfig = errors.New("invalid loop config")
