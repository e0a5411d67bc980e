package dataset

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/agentfleet/fleet/queue/wire"
)

// Unreviewed is the Filter.Verdicts value that keeps jobs without a review.
const Unreviewed = "unreviewed"

// Filter selects the transcripts Export keeps. A zero field keeps all.
type Filter struct {
	// Operations keeps jobs of these operations.
	Operations []string
	// AgentVersion keeps runs whose agent digest (Transcript.AgentDigest,
	// "sha256:<hex>") starts with it; "sha256:" may be left out.
	AgentVersion string
	// Model keeps runs whose model's digest starts with it, or whose
	// model name or backend contains it.
	Model string
	// States keeps runs that ended in these states (succeeded, failed...).
	States []wire.JobState
	// Verdicts keeps jobs whose last review has one of these verdicts
	// (accepted, rejected) or, with Unreviewed, that have none.
	Verdicts []string
	// Since and Until keep runs that finished in [Since, Until).
	Since, Until time.Time
	// Teacher, when set, keeps only teacher runs (true) or only the
	// others (false).
	Teacher *bool
}

// Validate checks the filter's values.
func (f *Filter) Validate() error {
	for _, v := range f.Verdicts {
		if v != string(wire.VerdictAccepted) && v != string(wire.VerdictRejected) && v != Unreviewed {
			return fmt.Errorf("dataset: verdict %q: want accepted, rejected or unreviewed", v)
		}
	}
	for _, s := range f.States {
		switch s {
		case wire.StateSucceeded, wire.StateFailed, wire.StateDead, wire.StateCanceled:
		default:
			return fmt.Errorf("dataset: outcome %q: want succeeded, failed, dead or canceled", s)
		}
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Since.Before(f.Until) {
		return fmt.Errorf("dataset: since %s is not before until %s", f.Since.Format(time.RFC3339), f.Until.Format(time.RFC3339))
	}
	return nil
}

// header is the part of a stored transcript the filter and the join read
// (decoding it validates the whole record's JSON).
type header struct {
	JobID       string         `json:"job_id"`
	Operation   string         `json:"operation"`
	AgentDigest string         `json:"agent_digest"`
	Teacher     bool           `json:"teacher"`
	Lease       uint64         `json:"lease"`
	Model       wire.ModelInfo `json:"model"`
	Truncated   bool           `json:"truncated"`
	LastChance  bool           `json:"last_chance"`
	State       wire.JobState  `json:"state"`
	Timings     struct {
		FinishedAt time.Time `json:"finished_at"`
	} `json:"timings"`
}

// drop says why the filter drops a transcript ("" keeps it); verdict is
// the job's last review's verdict, "" when it has none.
func (f *Filter) drop(h *header, verdict wire.Verdict) string {
	switch {
	case len(f.Operations) > 0 && !slices.Contains(f.Operations, h.Operation):
		return "filtered out: operation"
	case f.AgentVersion != "" && !strings.HasPrefix(strings.TrimPrefix(h.AgentDigest, "sha256:"), strings.TrimPrefix(f.AgentVersion, "sha256:")):
		return "filtered out: agent version"
	case f.Model != "" && !matchModel(h.Model, f.Model):
		return "filtered out: model"
	case len(f.States) > 0 && !slices.Contains(f.States, h.State):
		return "filtered out: outcome"
	case len(f.Verdicts) > 0 && !slices.Contains(f.Verdicts, verdictName(verdict)):
		return "filtered out: review verdict"
	case !f.Since.IsZero() && h.Timings.FinishedAt.Before(f.Since), !f.Until.IsZero() && !h.Timings.FinishedAt.Before(f.Until):
		return "filtered out: time range"
	case f.Teacher != nil && *f.Teacher != h.Teacher:
		return "filtered out: teacher run"
	}
	return ""
}

func verdictName(v wire.Verdict) string {
	if v == "" {
		return Unreviewed
	}
	return string(v)
}

func matchModel(m wire.ModelInfo, want string) bool {
	if m.Digest != "" && strings.HasPrefix(strings.TrimPrefix(m.Digest, "sha256:"), strings.TrimPrefix(want, "sha256:")) {
		return true
	}
	return strings.Contains(m.Name, want) || m.Backend == want
}
