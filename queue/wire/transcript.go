package wire

import (
	"strings"
	"time"

	"github.com/agentfleet/fleet/fleettype"
)

// Transcripts and reviews (docs/PROTOCOL.md §14): a finished run's whole
// conversation, kept much longer than results, and the human verdicts on
// it.
const (
	// StreamTranscripts is the Limits stream of transcripts and reviews
	// (queue.transcripts_max_age, default 90 days).
	StreamTranscripts = "FLEET_TRANSCRIPTS"
	// SubjectTranscriptsPrefix + job id carries the job's Transcript. A
	// job may have more than one (an attempt whose lease was taken over
	// after it wrote its transcript): the one of the job is the message
	// whose stream sequence the stored result names (AgentResult.TranscriptSeq).
	SubjectTranscriptsPrefix = "agents.transcripts."
	// SubjectReviewsPrefix + job id carries the job's Review records; the
	// last one is the job's verdict.
	SubjectReviewsPrefix = "agents.reviews."
)

// TranscriptSubject is the subject of a job's transcripts.
func TranscriptSubject(jobID string) string { return SubjectTranscriptsPrefix + jobID }

// ReviewSubject is the subject of a job's reviews.
func ReviewSubject(jobID string) string { return SubjectReviewsPrefix + jobID }

// ModelInfo names the model a run used. Digest is "sha256:<hex>" of the
// model file (a GGUF) when the worker knows it; backends without a file
// (scripted, remote) give a stable description in Name and no digest.
//
// Name is what the agent asked for, resolved: a local path or a stored
// model's "name@version" (docs/PROTOCOL.md "Models").
type ModelInfo struct {
	Backend string `json:"backend" msgpack:"backend"`
	Name    string `json:"name,omitempty" msgpack:"name,omitempty"`
	Digest  string `json:"digest,omitempty" msgpack:"digest,omitempty"`
	// Adapter and AdapterDigest name a LoRA adapter over the model, if any.
	Adapter       string `json:"adapter,omitempty" msgpack:"adapter,omitempty"`
	AdapterDigest string `json:"adapter_digest,omitempty" msgpack:"adapter_digest,omitempty"`
}

// Transcript is a finished run's conversation, stored on
// agents.transcripts.<job_id> before the job's result.
type Transcript struct {
	Version   int    `json:"version"`
	JobID     string `json:"job_id"`
	Operation string `json:"operation"`
	// Agent is the agent's name.
	Agent string `json:"agent,omitempty"`
	// AgentVersion is a pushed agent's version (the fleet_agents bucket);
	// absent for an agent from a worker's folder.
	AgentVersion uint64 `json:"agent_version,omitempty"`
	// AgentDigest is "sha256:<hex>": a pushed agent's digest, else one
	// over the definition the run used (its model-facing fields and its
	// .pym files). It tells the versions of an agent apart. Empty from
	// workers older than it.
	AgentDigest string `json:"agent_digest,omitempty"`
	// ModelRef is the model reference the run's definition named (the
	// agent's model:, or its canary's); "" for the worker's default.
	ModelRef string `json:"model_ref,omitempty"`
	// Canary is set when the job fell in the agent's canary share.
	Canary bool `json:"canary,omitempty"`
	// Teacher is set on a teacher run: the job ran on the worker's remote
	// teacher model (named in Model) instead of its own, so that its
	// transcript can become training data for the local model.
	Teacher bool `json:"teacher,omitempty"`
	// Lease is the revision of the lease the attempt held (its result's
	// Nats-Msg-Id is "<job_id>-result-<lease>").
	Lease   uint64    `json:"lease"`
	Worker  string    `json:"worker"`
	Attempt int       `json:"attempt"`
	Model   ModelInfo `json:"model"`
	// Tools are the declarations offered on every turn.
	Tools []fleettype.ToolSpec `json:"tools"`
	// Messages is the conversation as the model last saw it, followed by
	// the answers to its last calls. When the loop trimmed old turns to fit
	// the context window, they appear as its summary message.
	Messages []fleettype.Message `json:"messages"`
	// LastChance is set when the run reached its turn limit and had the
	// loop's last-chance turn, on which only submit_result was offered
	// (Tools lists the catalog of the other turns).
	LastChance bool `json:"last_chance,omitempty"`
	// Truncated is set when message contents were cut to fit the server's
	// max_payload (each cut content ends with a marker).
	Truncated bool `json:"truncated,omitempty"`
	// State, Status, Error and ErrorCode are the result's outcome.
	State     JobState            `json:"state"`
	Status    fleettype.Status    `json:"status"`
	Error     string              `json:"error,omitempty"`
	ErrorCode fleettype.ErrorCode `json:"error_code,omitempty"`
	Turns     int                 `json:"turns"`
	ToolCalls int                 `json:"tool_calls"`
	Usage     fleettype.Usage     `json:"usage"`
	Timings   ResultTimings       `json:"timings"`
}

// Verdict is a review's decision.
type Verdict string

// Verdicts.
const (
	VerdictAccepted Verdict = "accepted"
	VerdictRejected Verdict = "rejected"
)

// Review is a human verdict on a job's result, published on
// agents.reviews.<job_id>.
type Review struct {
	Version  int       `json:"version"`
	JobID    string    `json:"job_id"`
	Verdict  Verdict   `json:"verdict"`
	Reviewer string    `json:"reviewer"`
	Note     string    `json:"note,omitempty"`
	Time     time.Time `json:"time"`
}

// MaxReviewNote bounds a review's note (bytes).
const MaxReviewNote = 4096

// Validate checks a review before it is published.
func (r *Review) Validate() error {
	switch {
	case !ValidJobID(r.JobID):
		return Invalid("job_id", "%q is not a valid job id", Clip(r.JobID))
	case r.Verdict != VerdictAccepted && r.Verdict != VerdictRejected:
		return Invalid("verdict", "must be %q or %q, got %q", VerdictAccepted, VerdictRejected, Clip(string(r.Verdict)))
	case strings.TrimSpace(r.Reviewer) == "":
		return Invalid("reviewer", "is required")
	case len(r.Note) > MaxReviewNote:
		return Invalid("note", "is %d bytes, more than %d", len(r.Note), MaxReviewNote)
	case r.Time.IsZero():
		return Invalid("time", "is required")
	}
	return nil
}

// TranscriptView is a job's transcript joined with its last review (nil:
// not reviewed).
type TranscriptView struct {
	Transcript *Transcript `json:"transcript"`
	Review     *Review     `json:"review,omitempty"`
}
