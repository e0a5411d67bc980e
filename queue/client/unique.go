package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/queue/wire"
)

// ErrDuplicateJob matches a *DuplicateJobError.
var ErrDuplicateJob = errors.New("duplicate job")

// ErrInvalidUniqueKey: WithUnique got a key that is not a valid KV key.
var ErrInvalidUniqueKey = errors.New("queue: invalid uniqueness key")

// DuplicateJobError is Enqueue's refusal of a unique request: another job
// holding the same uniqueness key is queued or running. Code is
// wire.CodeDuplicateJob (QUEUE_007).
type DuplicateJobError struct {
	// Key is the uniqueness key.
	Key string
	// JobID is the job that holds it.
	JobID string
}

// Error implements error.
func (e *DuplicateJobError) Error() string {
	return fmt.Sprintf("%s: duplicate job: uniqueness key %q is held by job %s (queued or running)", wire.CodeDuplicateJob, e.Key, e.JobID)
}

// Is matches ErrDuplicateJob.
func (e *DuplicateJobError) Is(target error) bool { return target == ErrDuplicateJob }

// staleGrace is how long a key whose job has no status at all is still
// respected: the holder may be between taking the key and publishing.
const staleGrace = time.Minute

// WithUnique makes the request unique by key (docs/PROTOCOL.md §13):
// Enqueue creates key in the fleet_unique bucket with the job id
// (compare-and-set on revision 0) and refuses with a *DuplicateJobError
// naming the holder while another job holds it. The worker deletes the key
// once the job's result is stored. An empty key means DefaultUniqueKey.
// The job's queued record is written even with ClientOptions.NoStatus:
// the next request reads the holder's status to tell a live holder from a
// key left behind.
func WithUnique(key string) EnqueueOption {
	return func(o *enqueueOptions) { o.unique, o.key = true, key }
}

// DefaultUniqueKey is "<operation>.<node>.<digest>": the node id's hex
// SHA-256 prefix (node ids hold characters keys may not) and a SHA-256
// prefix of the workspace files (paths and contents, in path order).
func DefaultUniqueKey(req *wire.RunRequest) string {
	node := sha256.Sum256([]byte(req.Node.ID))
	h := sha256.New()
	paths := make([]string, 0, len(req.Files))
	for p := range req.Files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		h.Write([]byte(p))
		h.Write([]byte{0})
		h.Write([]byte(req.Files[p]))
		h.Write([]byte{0})
	}
	return req.Operation + "." + hex.EncodeToString(node[:8]) + "." + hex.EncodeToString(h.Sum(nil)[:8])
}

type uniqueHold struct {
	kv  jetstream.KeyValue
	key string
	rev uint64
}

func (c *Client) uniqueBucket(ctx context.Context) (jetstream.KeyValue, error) {
	kv, err := c.js.KeyValue(ctx, wire.BucketUnique)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, ErrNoStreams
	}
	if err != nil {
		return nil, fmt.Errorf("queue: bucket %s: %w", wire.BucketUnique, err)
	}
	return kv, nil
}

// acquireUnique takes the uniqueness key for req.JobID. A key held by a job
// that has finished (its worker died before releasing it), or by a job with
// no status for longer than staleGrace (its client died before
// publishing), is taken over by compare-and-set on its revision.
func (c *Client) acquireUnique(ctx context.Context, req *wire.RunRequest, key string) (*uniqueHold, error) {
	if key == "" {
		key = DefaultUniqueKey(req)
	}
	if !wire.ValidUniqueKey(key) {
		return nil, fmt.Errorf("%w: %q must be 1-%d characters of [A-Za-z0-9_=-] and single inner dots", ErrInvalidUniqueKey, wire.Clip(key), wire.MaxUniqueKeyLength)
	}
	kv, err := c.uniqueBucket(ctx)
	if err != nil {
		return nil, err
	}
	for try := 0; try < 5; try++ {
		rev, err := kv.Create(ctx, key, []byte(req.JobID))
		if err == nil {
			return &uniqueHold{kv: kv, key: key, rev: rev}, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return nil, fmt.Errorf("queue: uniqueness key %s: %w", key, err)
		}
		e, err := kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // released meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("queue: uniqueness key %s: %w", key, err)
		}
		holder := string(e.Value())
		if holder == req.JobID {
			return &uniqueHold{key: key}, nil // the same job again: its publish is deduplicated
		}
		if !c.staleHolder(ctx, holder, e.Created()) {
			return nil, &DuplicateJobError{Key: key, JobID: holder}
		}
		_ = kv.Delete(ctx, key, jetstream.LastRevision(e.Revision()))
	}
	return nil, fmt.Errorf("queue: uniqueness key %s kept changing", key)
}

// staleHolder reports whether the key's holder no longer holds it.
func (c *Client) staleHolder(ctx context.Context, jobID string, since time.Time) bool {
	st, err := c.Status(ctx, jobID)
	switch {
	case err == nil:
		return st.State.Terminal()
	case errors.Is(err, ErrJobNotFound):
		return time.Since(since) > staleGrace
	}
	return false
}

// releaseUnique gives back a key whose request was not published.
func (c *Client) releaseUnique(h *uniqueHold) {
	if h == nil || h.rev == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = h.kv.Delete(ctx, h.key, jetstream.LastRevision(h.rev))
}
