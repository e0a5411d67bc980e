package wire

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
)

// Runs parked on a human (docs/PROTOCOL.md §20).
const (
	// StateWaiting is a lease record's state for a job parked on a
	// question (StatusRecord.Question, Park, Deadline).
	StateWaiting JobState = "waiting"
	// BucketParked is the Object Store bucket holding parked runs' state,
	// one object per job id.
	BucketParked = "fleet_parked"
	// SubjectParkTimeoutPrefix + <job_id> holds a parked job's timeout: a
	// one-shot schedule message in FLEET_RUNS whose fired copy resumes the
	// job as timed out.
	SubjectParkTimeoutPrefix = "agents.parked."
	// HeaderResume, on a request, makes it a resume request of the parked
	// job: its value is the park id (the waiting record's "park").
	HeaderResume = "Fleet-Resume"
	// HeaderAnswer, on a resume request, is the answer, a JSON string.
	HeaderAnswer = "Fleet-Answer"
	// HeaderParkTimeout, on a resume request, says the park timed out
	// ("true"); the timeout schedule sets it.
	HeaderParkTimeout = "Fleet-Park-Timeout"
	// HeaderParkCancel, on a resume request, says a client canceled the
	// waiting job ("true", 1.10): the worker that claims it stores the
	// canceled result without running anything. A client sends it with
	// Fleet-Park-Timeout: true, so that a 1.9 worker ends the job too.
	HeaderParkCancel = "Fleet-Park-Cancel"
	// MaxAnswerBytes caps an answer (the decoded string).
	MaxAnswerBytes = 64 << 10
)

// ParkTimeoutSubject is the subject of job jobID's park timeout schedule.
func ParkTimeoutSubject(jobID string) string { return SubjectParkTimeoutPrefix + jobID }

// ParkTimeout is ParkTimeoutMS as a duration.
func (o RunOptions) ParkTimeout() time.Duration {
	return time.Duration(o.ParkTimeoutMS) * time.Millisecond
}

// ResumeRequest is what a resume request's headers say.
type ResumeRequest struct {
	// Park is the park id the answer is for.
	Park uint64
	// Answer is the answer (when not TimedOut).
	Answer string
	// TimedOut is set on the park timeout's firing.
	TimedOut bool
	// Canceled is set on a client's cancel of the waiting job (1.10).
	Canceled bool
}

// ParseResume reads a request's resume headers: nil, nil for an ordinary
// request; an error for a resume request whose headers are malformed.
func ParseResume(h nats.Header) (*ResumeRequest, error) {
	v := h.Get(HeaderResume)
	if v == "" {
		return nil, nil
	}
	park, err := strconv.ParseUint(v, 10, 64)
	if err != nil || park == 0 {
		return nil, Invalid(HeaderResume, "%q is not a park id", Clip(v))
	}
	r := &ResumeRequest{Park: park}
	if h.Get(HeaderParkCancel) == "true" {
		r.Canceled = true
		return r, nil
	}
	if h.Get(HeaderParkTimeout) == "true" {
		r.TimedOut = true
		return r, nil
	}
	a := h.Get(HeaderAnswer)
	if a == "" {
		return nil, Invalid(HeaderAnswer, "a resume request needs %s (or %s: true)", HeaderAnswer, HeaderParkTimeout)
	}
	if err := json.Unmarshal([]byte(a), &r.Answer); err != nil {
		return nil, Invalid(HeaderAnswer, "not a JSON string: %v", err)
	}
	if err := ValidateAnswer(r.Answer); err != nil {
		return nil, err
	}
	return r, nil
}

// ValidateAnswer checks an answer: valid UTF-8, at most MaxAnswerBytes.
func ValidateAnswer(a string) error {
	if !utf8.ValidString(a) {
		return Invalid(HeaderAnswer, "not valid UTF-8")
	}
	if len(a) > MaxAnswerBytes {
		return Invalid(HeaderAnswer, "%d bytes, more than %d", len(a), MaxAnswerBytes)
	}
	return nil
}

// ResumeHeader builds the headers of a resume request answering park.
func ResumeHeader(park uint64, answer string) (nats.Header, error) {
	if err := ValidateAnswer(answer); err != nil {
		return nil, err
	}
	b, err := json.Marshal(answer)
	if err != nil {
		return nil, err
	}
	return nats.Header{HeaderResume: {strconv.FormatUint(park, 10)}, HeaderAnswer: {string(b)},
		HeaderContentType: {"application/json"}, HeaderProtocol: {"1"}}, nil
}

// CancelResumeHeader builds the headers of the resume request that ends a
// job waiting on park as canceled (1.10; Fleet-Park-Timeout too, for 1.9
// workers).
func CancelResumeHeader(park uint64) nats.Header {
	return nats.Header{HeaderResume: {strconv.FormatUint(park, 10)}, HeaderParkCancel: {"true"}, HeaderParkTimeout: {"true"},
		HeaderContentType: {"application/json"}, HeaderProtocol: {"1"}}
}

// ResumeBody is a resume request's body: the smallest valid request of the
// job (the worker takes everything else from the parked state).
func ResumeBody(jobID, operation string) []byte {
	b, _ := json.Marshal(map[string]any{"version": ProtocolVersion, "job_id": jobID, "operation": operation})
	return b
}

// ParkID formats a park id for errors.
func ParkID(p uint64) string { return fmt.Sprintf("park %d", p) }
