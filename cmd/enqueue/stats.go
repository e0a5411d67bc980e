package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/wire"
)

// cmdStats prints, per agent and model version, the jobs that ran, their
// success rate, the accept rate of the reviewed ones, the mean turns and
// the tokens per job, from the transcripts and reviews in
// FLEET_TRANSCRIPTS.
func (c *cli) cmdStats(args []string) error {
	fs := c.subFlags("stats", "stats [--operation OP] [--since D] [--json]")
	op := fs.String("operation", "", "only this operation")
	since := fs.Duration("since", 0, "only jobs that finished within this duration (e.g. 24h); 0 = all kept")
	asJSON := fs.Bool("json", false, "print one JSON object per row")
	if _, err := c.parse(fs, args, 0, "no arguments"); err != nil {
		return err
	}
	if *since < 0 {
		return fail(exitUsage, "--since must not be negative")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	nc, js, err := c.connectJS(ctx)
	if err != nil {
		return err
	}
	defer nc.Close()
	ts, rs, err := readRuns(ctx, js)
	if err != nil {
		return connErr(err)
	}
	var after time.Time
	if *since > 0 {
		after = time.Now().Add(-*since)
	}
	rows := aggregateStats(ts, rs, *op, after)
	if *asJSON {
		for _, r := range rows {
			b, err := json.Marshal(r)
			if err != nil {
				return err
			}
			fmt.Fprintf(c.stdout, "%s\n", b)
		}
		return nil
	}
	return printStats(c.stdout, rows)
}

// statRow is one line of `enqueue stats`: the jobs of one operation that
// ran on one model version.
type statRow struct {
	Operation string `json:"operation"`
	// Model is the model version: the reference the agent (or its canary)
	// named, else the backend's model name.
	Model  string `json:"model"`
	Digest string `json:"digest,omitempty"`
	Canary bool   `json:"canary,omitempty"`
	Jobs   int    `json:"jobs"`
	// Succeeded counts runs with status success.
	Succeeded int `json:"succeeded"`
	// Reviewed and Accepted count the jobs with a review, and those whose
	// last review accepted them.
	Reviewed int `json:"reviewed"`
	Accepted int `json:"accepted"`
	// SuccessRate is Succeeded/Jobs; AcceptRate Accepted/Reviewed (null
	// without reviews).
	SuccessRate  float64  `json:"success_rate"`
	AcceptRate   *float64 `json:"accept_rate"`
	MeanTurns    float64  `json:"mean_turns"`
	TokensPerJob float64  `json:"tokens_per_job"`
	turns        int
	tokens       int
}

// modelVersion names the model version a transcript ran on.
func modelVersion(t *wire.Transcript) string {
	return cmp.Or(t.ModelRef, t.Model.Name, t.Model.Backend, "unknown")
}

// aggregateStats groups each job's transcript (the one with the highest
// lease, the attempt that stored the result) by operation, model version
// and digest, joined with the job's last review. op filters by operation;
// after, when set, keeps jobs that finished after it. Rows are sorted by
// operation, then by jobs (most first), then model.
func aggregateStats(ts map[string]*wire.Transcript, rs map[string]*wire.Review, op string, after time.Time) []statRow {
	type key struct{ op, model, digest string }
	byKey := map[key]*statRow{}
	for id, t := range ts {
		if op != "" && t.Operation != op {
			continue
		}
		if !after.IsZero() && t.Timings.FinishedAt.Before(after) {
			continue
		}
		k := key{t.Operation, modelVersion(t), t.Model.Digest}
		r := byKey[k]
		if r == nil {
			r = &statRow{Operation: k.op, Model: k.model, Digest: k.digest}
			byKey[k] = r
		}
		r.Jobs++
		r.Canary = r.Canary || t.Canary
		if t.Status == fleettype.StatusSuccess {
			r.Succeeded++
		}
		r.turns += t.Turns
		r.tokens += t.Usage.PromptTokens + t.Usage.CompletionTokens
		if rv := rs[id]; rv != nil {
			r.Reviewed++
			if rv.Verdict == wire.VerdictAccepted {
				r.Accepted++
			}
		}
	}
	rows := make([]statRow, 0, len(byKey))
	for _, r := range byKey {
		n := float64(r.Jobs)
		r.SuccessRate, r.MeanTurns, r.TokensPerJob = float64(r.Succeeded)/n, float64(r.turns)/n, float64(r.tokens)/n
		if r.Reviewed > 0 {
			a := float64(r.Accepted) / float64(r.Reviewed)
			r.AcceptRate = &a
		}
		rows = append(rows, *r)
	}
	slices.SortFunc(rows, func(a, b statRow) int {
		return cmp.Or(strings.Compare(a.Operation, b.Operation), cmp.Compare(b.Jobs, a.Jobs),
			strings.Compare(a.Model, b.Model), strings.Compare(a.Digest, b.Digest))
	})
	return rows
}

// printStats writes the table.
func printStats(w io.Writer, rows []statRow) error {
	if len(rows) == 0 {
		_, err := fmt.Fprintln(w, "no transcripts kept (jobs record one when they finish; see queue.transcripts_max_age)")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "OPERATION\tMODEL\tDIGEST\tJOBS\tSUCCESS\tREVIEWED\tACCEPT\tMEAN TURNS\tTOKENS/JOB\t")
	for _, r := range rows {
		model := r.Model
		if r.Canary {
			model += " (canary)"
		}
		accept := "-"
		if r.AcceptRate != nil {
			accept = fmt.Sprintf("%.1f%%", 100**r.AcceptRate)
		}
		digest := "-"
		if r.Digest != "" {
			digest = shortDigest(r.Digest)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%.1f%%\t%d\t%s\t%.2f\t%.0f\t\n", r.Operation, model, digest, r.Jobs,
			100*r.SuccessRate, r.Reviewed, accept, r.MeanTurns, r.TokensPerJob)
	}
	return tw.Flush()
}

// readRuns reads every transcript and review FLEET_TRANSCRIPTS holds (up
// to its last message when the read starts): per job the transcript with
// the highest lease and the last review.
func readRuns(ctx context.Context, js jetstream.JetStream) (map[string]*wire.Transcript, map[string]*wire.Review, error) {
	ts, rs := map[string]*wire.Transcript{}, map[string]*wire.Review{}
	st, err := js.Stream(ctx, wire.StreamTranscripts)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil, fmt.Errorf("%w (%s)", client.ErrNoStreams, wire.StreamTranscripts)
	}
	if err != nil {
		return nil, nil, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, nil, err
	}
	last := info.State.LastSeq
	if info.State.Msgs == 0 {
		return ts, rs, nil
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{wire.SubjectTranscriptsPrefix + ">", wire.SubjectReviewsPrefix + ">"},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return nil, nil, err
	}
	for {
		batch, err := cons.Fetch(512, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return nil, nil, err
		}
		n := 0
		for m := range batch.Messages() {
			n++
			meta, err := m.Metadata()
			if err != nil {
				return nil, nil, err
			}
			if strings.HasPrefix(m.Subject(), wire.SubjectTranscriptsPrefix) {
				var t wire.Transcript
				if json.Unmarshal(m.Data(), &t) == nil && t.JobID != "" {
					if old := ts[t.JobID]; old == nil || t.Lease >= old.Lease {
						ts[t.JobID] = &t
					}
				}
			} else {
				var r wire.Review
				if json.Unmarshal(m.Data(), &r) == nil && r.JobID != "" {
					rs[r.JobID] = &r
				}
			}
			if meta.Sequence.Stream >= last {
				return ts, rs, nil
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return nil, nil, err
		}
		if n == 0 {
			// Nothing more matches (the newest messages were of other
			// subjects, or expired meanwhile).
			return ts, rs, nil
		}
	}
}
