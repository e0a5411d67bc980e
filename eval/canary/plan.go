package canary

import (
	"fmt"
	"strconv"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/queue/wire"
)

// maxPlanTries bounds the search for a batch id in Plan.
const maxPlanTries = 1 << 20

// A Plan lays a canary run out as one batch: every task of the canary arm
// and of the base arm is a job, and each job falls in the share the
// workers will route it to. The workers pick a job's model version with
// agents.CanaryPick(job id, share), a function of the id a client can
// compute (docs/PROTOCOL.md §16.3); a batch's job ids are "<batch>-<n>"
// (§21). Plan therefore sets the share to the canary arm's part of the
// batch and draws batch ids until exactly that many of the batch's ids
// fall in the share; the canary arm's tasks then take those positions.
// Both arms run in one batch, through the same workers, at the same time,
// and a task can be in both (a paired comparison).
type Plan struct {
	// BatchID is the batch to publish; its n-th job (from 1) is
	// wire.BatchJobID(BatchID, n).
	BatchID string
	// Share is the agent's canary share for the run.
	Share float64
	// Canary[k] says whether the batch's job k+1 falls in the canary.
	Canary []bool
}

// NewPlan finds a plan for a batch of canary+base jobs under ids
// "<prefix>-<try>". prefix must be a valid batch id.
func NewPlan(prefix string, canary, base int) (*Plan, error) {
	if canary < 1 || base < 0 {
		return nil, fmt.Errorf("canary: a run needs at least one canary task (got %d) and no negative base count (%d)", canary, base)
	}
	n := canary + base
	share := float64(canary) / float64(n)
	if base == 0 {
		share = 1
	}
	for try := 0; try < maxPlanTries; try++ {
		id := prefix + "-" + strconv.Itoa(try)
		if !wire.ValidBatchID(id) {
			return nil, fmt.Errorf("canary: %q is not a valid batch id", id)
		}
		picks := make([]bool, n)
		count := 0
		for k := range picks {
			picks[k] = agents.CanaryPick(wire.BatchJobID(id, k+1), share)
			if picks[k] {
				count++
			}
		}
		if count == canary {
			return &Plan{BatchID: id, Share: share, Canary: picks}, nil
		}
	}
	return nil, fmt.Errorf("canary: no batch id under %s gives %d canary jobs of %d in %d tries", prefix, canary, n, maxPlanTries)
}

// Order assigns the arms' tasks to the batch's positions: position k runs
// canaryTasks[i] when the plan's job k+1 falls in the canary (in order),
// baseTasks[j] otherwise. It returns, per position, the arm and the index
// into that arm's list.
func (p *Plan) Order() (canaryAt []bool, index []int) {
	index = make([]int, len(p.Canary))
	var c, b int
	for k, in := range p.Canary {
		if in {
			index[k] = c
			c++
		} else {
			index[k] = b
			b++
		}
	}
	return p.Canary, index
}
