// Package presence is the worker presence record (docs/PROTOCOL.md §11,
// optional): every few seconds a worker puts a small JSON record about
// itself (slots, operations, model, the jobs it runs, its token rate) in
// the fleet_workers KV bucket, whose TTL removes a worker that stopped
// without saying so. The web console reads the bucket for its workers page
// and for how many slots serve each operation.
//
// A Tracker wraps each slot's queue.Handler to know the running jobs and
// the tokens generated; a Publisher writes the record. Nothing else in the
// fleet depends on the record: a worker without the permission to write the
// bucket logs a warning and works as before.
package presence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Bucket is the KV bucket of presence records, keyed by Key.
const Bucket = "fleet_workers"

// Version is the record's format version.
const Version = 1

// Record is one worker's presence record (JSON).
type Record struct {
	Version int `json:"version"`
	// Name is the worker's name (worker.name); Host and PID say where it
	// runs.
	Name string `json:"name"`
	Host string `json:"host,omitempty"`
	PID  int    `json:"pid,omitempty"`
	// StartedAt is when the worker started; UpdatedAt when it wrote this
	// record. EveryMS is its write interval in milliseconds.
	StartedAt time.Time `json:"started_at"`
	UpdatedAt time.Time `json:"updated_at"`
	EveryMS   int64     `json:"every_ms"`
	// Operations are the operations the worker serves, Slots its slots.
	Operations []string `json:"operations"`
	Slots      int      `json:"slots"`
	// Model describes the model backend ("llama path=... threads=1").
	Model string `json:"model,omitempty"`
	// Running are the jobs its slots run now.
	Running []Job `json:"running"`
	// Tokens counts the tokens generated since the worker started;
	// TokensPerSecond is the rate over the last interval (all slots), and
	// DecodeTokensPerSecond the rate while decoding (tokens per second of
	// generation time, per slot).
	Tokens                int64   `json:"completion_tokens"`
	TokensPerSecond       float64 `json:"tokens_per_second"`
	DecodeTokensPerSecond float64 `json:"decode_tokens_per_second"`
	// Succeeded, Failed and Dead count the jobs it finished.
	Succeeded int64 `json:"succeeded"`
	Failed    int64 `json:"failed"`
	Dead      int64 `json:"dead"`
	// Console is the URL of the worker's web console ("" = none).
	Console string `json:"console,omitempty"`
	// Agents maps each operation the worker serves to the agent version
	// its new jobs run: a pushed agent's digest ("sha256:<hex>", as
	// results name it in agent_digest), or AgentLocal for an agent of the
	// worker's own folder. Absent from workers that do not report it.
	Agents map[string]string `json:"agents,omitempty"`
}

// AgentLocal is Record.Agents' value for an agent from the worker's own
// agents folder (it wins over a pushed one).
const AgentLocal = "local"

// Job is a job a slot runs.
type Job struct {
	JobID     string    `json:"job_id"`
	Operation string    `json:"operation"`
	Slot      int       `json:"slot"`
	Turn      int       `json:"turn"`
	StartedAt time.Time `json:"started_at"`
}

// Busy is the number of slots running a job.
func (r *Record) Busy() int { return len(r.Running) }

// Uptime is how long the worker has been up at the record's time.
func (r *Record) Uptime() time.Duration { return r.UpdatedAt.Sub(r.StartedAt) }

// Key is a worker's key in the bucket: its name and process id, with the
// characters a key may not hold replaced by '_' (two workers of one host
// share the default name).
func Key(name string, pid int) string {
	var b strings.Builder
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	if b.Len() == 0 {
		b.WriteString("worker")
	}
	return b.String() + "-" + strconv.Itoa(pid)
}

// List returns the presence record of every worker that wrote one within
// the bucket's TTL, by name. No bucket (no worker publishes presence) is
// an empty list, not an error.
func List(ctx context.Context, js jetstream.JetStream) ([]Record, error) {
	kv, err := js.KeyValue(ctx, Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("presence: %w", err)
	}
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("presence: %w", err)
	}
	defer func() { _ = w.Stop() }()
	var out []Record
	for {
		select {
		case e := <-w.Updates():
			if e == nil {
				slices.SortFunc(out, func(a, b Record) int { return strings.Compare(a.Name+a.Host, b.Name+b.Host) })
				return out, nil
			}
			var r Record
			if json.Unmarshal(e.Value(), &r) == nil {
				out = append(out, r)
			}
		case <-ctx.Done():
			return nil, fmt.Errorf("presence: %w", context.Cause(ctx))
		}
	}
}
