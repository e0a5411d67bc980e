package queue

import (
	"errors"

	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// storeTranscript stores the run's transcript t, if any, before its result
// res, and makes res name it: a stored result implies its transcript. The
// engine writes it rather than the handler because the engine holds the
// lease: the write is checked against it and keyed by its revision. False
// means the job was dropped (fenced) or handed back (shutdown): nothing
// more is written.
func (s *slot) storeTranscript(j *job, res *wire.AgentResult, t *wire.Transcript) bool {
	if t == nil {
		return true
	}
	t.Version = wire.ProtocolVersion
	t.JobID, t.Operation, t.Worker, t.Attempt = res.JobID, res.Operation, res.Worker, res.Attempts
	t.State, t.Status, t.Error, t.ErrorCode = res.State, res.Status, res.Error, res.ErrorCode
	t.Turns, t.ToolCalls, t.Usage, t.Timings = res.Turns, res.ToolCalls, res.Usage, res.Timings
	seq, err := s.w.broker.PutTranscript(s.w.runCtx, j.lease, t)
	switch {
	case err == nil:
		res.TranscriptSeq = seq
		return true
	case errors.Is(err, ledger.ErrFenced):
		s.fenced(j)
	default:
		s.log.Warn("transcript not stored before shutdown; handing the job back", "job", j.id, "err", err)
		s.requeue(j, 0, "worker shutdown before the transcript was stored")
	}
	return false
}
