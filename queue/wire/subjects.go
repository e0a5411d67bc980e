package wire

import (
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
)

// ResultSubject is where a job's result is stored.
func ResultSubject(jobID string) string { return SubjectResultsPrefix + jobID }

// EventSubject is where a job's events are stored.
func EventSubject(jobID string) string { return SubjectEventsPrefix + jobID }

// CancelSubject is where a cancel for a job is published (core NATS).
func CancelSubject(jobID string) string { return SubjectCancelPrefix + jobID }

// RunSubject is where requests for an operation are published.
func RunSubject(operation string) string { return SubjectRunPrefix + operation }

// DLQSubject is where an operation's dead letters are stored.
func DLQSubject(operation string) string { return SubjectDLQPrefix + operation }

// ReplySubjects are the live subjects for a Reply-To prefix.
func ReplySubjects(replyTo string) (result, events string) {
	return replyTo + ".result", replyTo + ".events"
}

// LeaseSubject is where a job's lease records are stored (FLEET_RESULTS).
func LeaseSubject(jobID string) string { return SubjectLeasesPrefix + jobID }

// ResultMsgID is the Nats-Msg-Id of the result an attempt stores under its
// lease revision: "<job_id>-result-<rev>" (a retried write of the same
// result is dropped as a duplicate; another attempt's is fenced instead).
func ResultMsgID(jobID string, leaseRev uint64) string {
	return jobID + "-result-" + strconv.FormatUint(leaseRev, 10)
}

// DLQMsgID is the Nats-Msg-Id of a job's dead letter.
func DLQMsgID(jobID string) string { return jobID + "-dlq" }

// NewRequestMsg encodes req for publishing: subject agents.run.<operation>,
// Nats-Msg-Id = job id, Content-Type, Fleet-Protocol, and Reply-To when
// replyTo is not empty. It validates req first.
func NewRequestMsg(req *RunRequest, enc Encoding, replyTo string) (*nats.Msg, error) {
	if req.Version == 0 {
		req.Version = ProtocolVersion
	}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	if replyTo != "" {
		if err := ValidateReplyTo(replyTo); err != nil {
			return nil, err
		}
	}
	data, err := enc.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("queue: encode request: %w", err)
	}
	if len(data) > MaxRequestBytes {
		return nil, Invalid("", "encoded request is %d bytes, more than %d", len(data), MaxRequestBytes)
	}
	m := &nats.Msg{Subject: RunSubject(req.Operation), Data: data, Header: nats.Header{}}
	m.Header.Set(HeaderMsgID, req.JobID)
	m.Header.Set(HeaderContentType, enc.ContentType())
	m.Header.Set(HeaderProtocol, "1")
	if replyTo != "" {
		m.Header.Set(HeaderReplyTo, replyTo)
	}
	return m, nil
}
