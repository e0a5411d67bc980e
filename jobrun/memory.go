package jobrun

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/cairn/toolexec"
	"github.com/agentfleet/fleet/jobrun/memory"
	"github.com/agentfleet/fleet/queue/wire"
)

// memoryRun is the run's memory when the agent declares memory: and the
// worker has a memory store, else nil (the agent's remember calls then
// raise an error naming the reason, and nothing is recalled).
func (p *Handler) memoryRun(req *wire.RunRequest, def *agents.Definition, log *slog.Logger) *memory.Run {
	if def.Memory == nil {
		return nil
	}
	if p.cfg.Memory == nil {
		log.Warn("agent declares memory: but this worker has no memory store; the run goes without")
		return nil
	}
	m, err := memory.NewRun(memory.RunConfig{
		Store: p.cfg.Memory, Agent: req.Operation, Memory: def.Memory, Project: wire.ProjectOf(req),
		Node: agents.Node(req.Node), JobID: req.JobID, Logger: log,
	})
	if err != nil {
		log.Warn("memory: the run goes without it", "err", err)
		return nil
	}
	return m
}

// rememberer is m as the executor's Rememberer (a nil *memory.Run must be a
// nil interface).
func rememberer(m *memory.Run) toolexec.Rememberer {
	if m == nil {
		return nil
	}
	return m
}

// flushMemory writes what the run remembered, once the run has ended with
// a result (docs/PROTOCOL.md §15). A failure is the job's error: the queue
// runs it again, and the new attempt's entries overwrite the same keys.
func flushMemory(ctx context.Context, m *memory.Run) error {
	if m == nil {
		return nil
	}
	if err := m.Flush(ctx); err != nil {
		return fmt.Errorf("jobrun: memory: %w", err)
	}
	return nil
}
