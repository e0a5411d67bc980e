package queue

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentfleet/fleet/queue/wire"
)

// firedJobID gives a firing of a recurring schedule its own job id
// (docs/PROTOCOL.md §12.2): the server copies the schedule message's body,
// so every firing carries the same job_id; the worker replaces it with
// wire.FiredJobIDOf. A one-shot firing keeps the job id the client chose.
func firedJobID(req *wire.RunRequest, h nats.Header) {
	if id, ok := wire.FiredJobIDOf(h); ok {
		req.JobID = id
	}
}

// uniqueKey is the job's Fleet-Unique key: its request's, or for a resumed
// job the one park kept with its parked state, read on first need
// (before the state is removed). Best effort: a key it cannot read is
// freed by a later client's takeover or the bucket's TTL, as when a
// worker dies.
func (w *Worker) uniqueKey(j *job) string {
	if j.resume == nil {
		return nats.Header(j.d.Header).Get(wire.HeaderUnique)
	}
	if !j.uniqueLoaded {
		j.uniqueLoaded = true
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if pj, err := w.broker.ParkedState(ctx, j.id); err == nil {
			j.unique = pj.Unique
		}
	}
	return j.unique
}

// releaseUnique deletes the job's uniqueness key (header Fleet-Unique)
// once its result is stored, if the key still names this job. A worker
// that dies before this leaves the key behind: the next client that is
// refused by it finds the job finished and takes the key over
// (docs/PROTOCOL.md §13), and the bucket's TTL bounds it in any case.
func (w *Worker) releaseUnique(j *job) {
	key := w.uniqueKey(j)
	if !wire.ValidUniqueKey(key) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.broker.ReleaseUnique(ctx, key, j.id); err != nil {
		w.log.Warn("cannot release the uniqueness key", "job", j.id, "key", key, "err", err)
	}
}
