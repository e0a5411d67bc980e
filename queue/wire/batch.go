package wire

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agentfleet/fleet/fleettype"
)

// Batches (protocol 1.11, docs/PROTOCOL.md §21): many jobs published as one
// fan-out share a batch id. The batch's record (its manifest) lives in the
// fleet_batches bucket; its job index and the workers' per-job tallies live
// in FLEET_BATCHES, one subject per batch, operation and state, so a
// batch's counts are one stream-info call with a subject filter however
// many jobs it has.
const (
	// StreamBatches holds batch job indexes and tallies (agents.batch.>).
	StreamBatches = "FLEET_BATCHES"
	// BucketBatches is the KV bucket of batch records, keyed by batch id.
	BucketBatches = "fleet_batches"
	// SubjectBatchPrefix + batch id + "." ... are a batch's subjects.
	SubjectBatchPrefix = "agents.batch."
	// HeaderBatch (optional, on a request; 1.11) is the batch id of the
	// job: the worker tallies the job's start and end under it.
	HeaderBatch = "Fleet-Batch"
	// MaxBatchIDLength caps batch ids, so that "<batch>-<n>" job ids fit.
	MaxBatchIDLength = 64
	// MaxLabels caps a batch's labels.
	MaxLabels = 16
	// MaxLabelKeyLength and MaxLabelValueLength cap a label.
	MaxLabelKeyLength   = 64
	MaxLabelValueLength = 256
	// BatchIndexChunk is how many jobs one index message lists at most.
	BatchIndexChunk = 500
	// BatchNoCode is the code token of a tally without an error code.
	BatchNoCode = "none"
)

// ValidBatchID reports whether id is a valid batch id: 1-64 characters of
// [A-Za-z0-9_-] (a single subject token and a KV key).
func ValidBatchID(id string) bool { return validToken(id, MaxBatchIDLength, true) }

// BatchJobID is the job id of the n-th job (from 1) of batch: "<batch>-<n>".
func BatchJobID(batch string, n int) string { return batch + "-" + strconv.Itoa(n) }

// ValidateLabels checks a batch's labels: at most 16; keys 1-64 of
// [A-Za-z0-9_.-]; values at most 256 bytes of UTF-8 without control
// characters. Checked in key order, so the error is deterministic.
func ValidateLabels(labels map[string]string) error {
	if len(labels) > MaxLabels {
		return Invalid("labels", "%d labels, more than %d", len(labels), MaxLabels)
	}
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !validLabelKey(k) {
			return Invalid("labels", "key %q must be 1-%d characters of [A-Za-z0-9_.-]", Clip(k), MaxLabelKeyLength)
		}
		v := labels[k]
		if !utf8.ValidString(v) {
			return Invalid(fmt.Sprintf("labels[%q]", k), "not valid UTF-8")
		}
		if len(v) > MaxLabelValueLength {
			return Invalid(fmt.Sprintf("labels[%q]", k), "is %d bytes, more than %d", len(v), MaxLabelValueLength)
		}
		for _, r := range v {
			if r < ' ' || r == 0x7f {
				return Invalid(fmt.Sprintf("labels[%q]", k), "contains a control character")
			}
		}
	}
	return nil
}

func validLabelKey(k string) bool {
	if k == "" || len(k) > MaxLabelKeyLength {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// ParseLabel reads a "key=value" label.
func ParseLabel(s string) (key, value string, err error) {
	k, v, ok := strings.Cut(s, "=")
	if !ok {
		return "", "", Invalid("labels", "%q is not key=value", Clip(s))
	}
	if err := ValidateLabels(map[string]string{k: v}); err != nil {
		return "", "", err
	}
	return k, v, nil
}

// BatchState is a batch record's publishing state.
type BatchState string

// Batch states.
const (
	// BatchPublishing: the fan-out is still publishing (or its publisher
	// died: UpdatedAt then stops moving).
	BatchPublishing BatchState = "publishing"
	// BatchPublished: every planned job was published.
	BatchPublished BatchState = "published"
	// BatchInterrupted: the fan-out stopped early (Ctrl-C, a lost
	// connection, an error); Published says how many jobs went out.
	BatchInterrupted BatchState = "interrupted"
	// BatchCanceled: someone canceled the batch (enqueue batch cancel).
	BatchCanceled BatchState = "canceled"
)

// BatchRecord is a batch's manifest, the value of its key in fleet_batches
// (JSON). The publisher creates it before the first job (a reused batch id
// is refused by the create) and updates it while and after publishing.
type BatchRecord struct {
	Version int    `json:"version"`
	BatchID string `json:"batch_id"`
	// Operations are the batch's operations, in the order asked.
	Operations []string `json:"operations"`
	// Labels are the batch's labels (also on every request).
	Labels map[string]string `json:"labels,omitempty"`
	// Project is the requests' project.
	Project string `json:"project,omitempty"`
	// Paths are what the fan-out was asked for (informational).
	Paths []string `json:"paths,omitempty"`
	// Planned is how many jobs the fan-out found; PlannedByOp per operation.
	Planned     int            `json:"planned"`
	PlannedByOp map[string]int `json:"planned_by_op,omitempty"`
	// Published is how many requests the server has stored (PubAcks) as
	// of UpdatedAt; PublishedByOp per operation.
	Published     int            `json:"published"`
	PublishedByOp map[string]int `json:"published_by_op,omitempty"`
	State         BatchState     `json:"state"`
	// Reason says why the batch was interrupted or canceled.
	Reason string `json:"reason,omitempty"`
	// Publisher names the process that published it (host and pid).
	Publisher string    `json:"publisher,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	// PublishedAt is when the last job was stored (state published).
	PublishedAt *time.Time `json:"published_at,omitempty"`
	// CanceledAt is when the batch was canceled.
	CanceledAt *time.Time `json:"canceled_at,omitempty"`
	UpdatedAt  time.Time  `json:"updated_at"`
}

// BatchJob is one job of a batch's index.
type BatchJob struct {
	// N is the job's place in the batch, from 1 (its job id is
	// BatchJobID(batch, N)).
	N         int    `json:"n"`
	JobID     string `json:"job_id"`
	Operation string `json:"operation"`
	// NodeID, NodeName, NodeType and FilePath are the request's node.
	NodeID   string `json:"node_id"`
	NodeName string `json:"node_name,omitempty"`
	NodeType string `json:"node_type,omitempty"`
	FilePath string `json:"file_path"`
}

// BatchIndex is one message of a batch's job index, on
// agents.batch.<batch>.jobs: up to BatchIndexChunk jobs, in order.
type BatchIndex struct {
	BatchID string     `json:"batch_id"`
	Jobs    []BatchJob `json:"jobs"`
}

// BatchTally is the body of a tally a worker writes for a batch job: on
// agents.batch.<batch>.started.<operation> when it first claims the job,
// on agents.batch.<batch>.done.<operation>.<state>.<code> when the job's
// result is stored.
type BatchTally struct {
	JobID string   `json:"job_id"`
	State JobState `json:"state,omitempty"`
	Code  string   `json:"code,omitempty"`
}

// BatchIndexSubject is where a batch's job index is published.
func BatchIndexSubject(batch string) string { return SubjectBatchPrefix + batch + ".jobs" }

// BatchStartedSubject is where a worker tallies a batch job's first claim.
func BatchStartedSubject(batch, operation string) string {
	return SubjectBatchPrefix + batch + ".started." + operation
}

// BatchDoneSubject is where a worker tallies a batch job's stored result.
// An empty code is BatchNoCode.
func BatchDoneSubject(batch, operation string, state JobState, code fleettype.ErrorCode) string {
	c := string(code)
	if c == "" || !validToken(c, 32, true) {
		c = BatchNoCode
	}
	return SubjectBatchPrefix + batch + ".done." + operation + "." + string(state) + "." + c
}

// BatchSubjects is the filter of every subject of a batch.
func BatchSubjects(batch string) string { return SubjectBatchPrefix + batch + ".>" }

// BatchTallyKey is what a tally subject counts: its kind ("started" or
// "done"), operation, state and code (the last two empty for started).
type BatchTallyKey struct {
	Kind      string
	Operation string
	State     JobState
	Code      fleettype.ErrorCode
}

// ParseBatchSubject reads a tally subject of batch; ok is false for the
// index subject and anything else.
func ParseBatchSubject(batch, subject string) (k BatchTallyKey, ok bool) {
	rest, found := strings.CutPrefix(subject, SubjectBatchPrefix+batch+".")
	if !found {
		return k, false
	}
	parts := strings.Split(rest, ".")
	switch {
	case len(parts) == 2 && parts[0] == "started":
		return BatchTallyKey{Kind: "started", Operation: parts[1]}, true
	case len(parts) == 4 && parts[0] == "done":
		k = BatchTallyKey{Kind: "done", Operation: parts[1], State: JobState(parts[2])}
		if parts[3] != BatchNoCode {
			k.Code = fleettype.ErrorCode(parts[3])
		}
		return k, true
	}
	return k, false
}

// BatchTallyMsgID is the Nats-Msg-Id of a job's tally of kind ("started" or
// "done"): a tally written again (a redelivery that finds the result) is
// stored once within the dedupe window.
func BatchTallyMsgID(jobID, kind string) string { return jobID + "-" + kind }
