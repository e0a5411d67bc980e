package eval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// RunsBucket is the JetStream key-value bucket eval runs are stored in, one
// key per run id.
const RunsBucket = "fleet_evals"

// ErrRunNotFound: no eval run with that id is stored.
var ErrRunNotFound = errors.New("eval: run not found")

// Run is one eval run: a suite's tasks run as a batch and graded.
type Run struct {
	ID    string   `json:"id"`
	Suite string   `json:"suite"`
	Seed  uint64   `json:"seed"`
	Split string   `json:"split"`
	Ops   []string `json:"ops"`
	// Model and AgentVersion are what the run was meant to measure (a job
	// that ran on another is graded a failure: other_model, other_agent);
	// Models counts the models the jobs actually ran on.
	Model        string         `json:"model,omitempty"`
	AgentVersion string         `json:"agent_version,omitempty"`
	Models       map[string]int `json:"models,omitempty"`
	Teacher      bool           `json:"teacher,omitempty"`
	BatchID      string         `json:"batch_id"`
	Started      time.Time      `json:"started"`
	Finished     time.Time      `json:"finished"`
	// Tasks is how many tasks the run has; every one has a Result.
	Tasks   int         `json:"tasks"`
	Summary []OpSummary `json:"summary"`
	Results []Result    `json:"results"`
}

func runsKV(ctx context.Context, js jetstream.JetStream, create bool) (jetstream.KeyValue, error) {
	if !create {
		kv, err := js.KeyValue(ctx, RunsBucket)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			return nil, ErrRunNotFound
		}
		return kv, err
	}
	return js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: RunsBucket,
		Description: "fleet eval runs (enqueue eval)", History: 1})
}

// SaveRun stores r under its id.
func SaveRun(ctx context.Context, js jetstream.JetStream, r *Run) error {
	if len(r.Results) != r.Tasks {
		return fmt.Errorf("eval: run %s has %d results for %d tasks", r.ID, len(r.Results), r.Tasks)
	}
	kv, err := runsKV(ctx, js, true)
	if err != nil {
		return fmt.Errorf("eval: %s bucket: %w", RunsBucket, err)
	}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if _, err := kv.Put(ctx, r.ID, b); err != nil {
		return fmt.Errorf("eval: store run %s (%d bytes): %w", r.ID, len(b), err)
	}
	return nil
}

// LoadRun reads the stored run id.
func LoadRun(ctx context.Context, js jetstream.JetStream, id string) (*Run, error) {
	kv, err := runsKV(ctx, js, false)
	if err != nil {
		return nil, err
	}
	e, err := kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("%w: %s", ErrRunNotFound, id)
	}
	if err != nil {
		return nil, err
	}
	var r Run
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return nil, fmt.Errorf("eval: stored run %s is corrupt: %w", id, err)
	}
	return &r, nil
}

// ListRuns returns every stored run, oldest first. A corrupt record is
// reported in bad and skipped.
func ListRuns(ctx context.Context, js jetstream.JetStream) (runs []*Run, bad []string, err error) {
	kv, err := runsKV(ctx, js, false)
	if errors.Is(err, ErrRunNotFound) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	keys, err := kv.Keys(ctx)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	for _, k := range keys {
		r, err := LoadRun(ctx, js, k)
		if err != nil {
			bad = append(bad, k+": "+err.Error())
			continue
		}
		runs = append(runs, r)
	}
	sort.Slice(runs, func(i, j int) bool { return runs[i].Started.Before(runs[j].Started) })
	return runs, bad, nil
}
