package ledger

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/queue/wire"
)

// ListStatus returns the status of every job the stores know (results and
// leases still retained in FLEET_RESULTS, records in the fleet_jobs bucket),
// with the precedence of ReadStatus, unordered. It reads each store once: a
// watcher over the bucket, and an ordered consumer over the last lease and
// result of every job, so it costs one round of messages, not one request
// per job.
func ListStatus(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue) ([]wire.StatusRecord, error) {
	client := map[string]*wire.StatusRecord{}
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("ledger: list %s: %w", wire.BucketJobs, err)
	}
	defer func() { _ = w.Stop() }()
	for done := false; !done; {
		select {
		case e := <-w.Updates():
			if e == nil {
				done = true // the initial values are all delivered
				break
			}
			var rec wire.StatusRecord
			if json.Unmarshal(e.Value(), &rec) != nil {
				continue // not a status record: skip it rather than fail the listing
			}
			if rec.JobID == "" {
				rec.JobID = e.Key()
			}
			client[rec.JobID] = &rec
		case <-ctx.Done():
			return nil, fmt.Errorf("ledger: list %s: %w", wire.BucketJobs, context.Cause(ctx))
		}
	}
	leases, results, err := lastRecords(ctx, js)
	if err != nil {
		return nil, err
	}
	out := make([]wire.StatusRecord, 0, len(client)+len(leases))
	seen := make(map[string]bool, len(client)+len(leases))
	pick := func(id string) {
		if seen[id] {
			return
		}
		seen[id] = true
		switch c := client[id]; {
		case results[id] != nil:
			out = append(out, *results[id])
		case c != nil && c.State == wire.StateCanceled:
			out = append(out, *c)
		case leases[id] != nil:
			out = append(out, *leases[id])
		case c != nil:
			out = append(out, *c)
		}
	}
	for id := range results {
		pick(id)
	}
	for id := range leases {
		pick(id)
	}
	for id := range client {
		pick(id)
	}
	return out, nil
}

// lastRecords reads the last lease record and the last result of every job
// retained in FLEET_RESULTS.
func lastRecords(ctx context.Context, js jetstream.JetStream) (leases, results map[string]*wire.StatusRecord, err error) {
	leases, results = map[string]*wire.StatusRecord{}, map[string]*wire.StatusRecord{}
	cons, err := js.OrderedConsumer(ctx, wire.StreamResults, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{wire.SubjectLeasesPrefix + ">", wire.SubjectResultsPrefix + ">"},
		DeliverPolicy:  jetstream.DeliverLastPerSubjectPolicy,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("ledger: list %s: %w", wire.StreamResults, err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("ledger: list %s: %w", wire.StreamResults, err)
	}
	if info.NumPending == 0 {
		return leases, results, nil
	}
	// The records there now: fetch exactly that many (Fetch waits for a
	// full batch otherwise).
	for remaining := info.NumPending; remaining > 0; {
		batch, err := cons.Fetch(int(min(remaining, 500)), jetstream.FetchContext(ctx))
		if err != nil {
			return nil, nil, fmt.Errorf("ledger: list %s: %w", wire.StreamResults, err)
		}
		var last jetstream.Msg
		for m := range batch.Messages() {
			last = m
			remaining--
			subj := m.Subject()
			switch {
			case strings.HasPrefix(subj, wire.SubjectLeasesPrefix):
				var rec wire.StatusRecord
				// A malformed last lease record counts as none (§8.3).
				if json.Unmarshal(m.Data(), &rec) == nil && rec.State != "" {
					rec.JobID = strings.TrimPrefix(subj, wire.SubjectLeasesPrefix)
					leases[rec.JobID] = &rec
				}
			default:
				r, err := wire.DecodeAgentResult(m.Data(), m.Headers().Get(wire.HeaderContentType))
				if err == nil {
					r.JobID = strings.TrimPrefix(subj, wire.SubjectResultsPrefix)
					results[r.JobID] = ResultStatus(r)
				}
			}
		}
		if err := batch.Error(); err != nil {
			return nil, nil, fmt.Errorf("ledger: list %s: %w", wire.StreamResults, err)
		}
		if last == nil {
			return leases, results, nil
		}
		if md, err := last.Metadata(); err != nil || md.NumPending == 0 {
			return leases, results, nil
		}
	}
	return leases, results, nil
}
