package jobrun_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/cairn/monty"
	"github.com/agentfleet/fleet/cairn/monty/montytest"
	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/internal/filedigest"
	"github.com/agentfleet/fleet/internal/testutil/natstest"
	"github.com/agentfleet/fleet/jobrun"
	"github.com/agentfleet/fleet/queue"
	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// A real lint job through a worker on an embedded server: its transcript
// (the conversation, the tools offered, the model's digest, the outcome)
// is stored before its result, which names it, and is read back by job id
// with the review a client publishes.
func TestTranscriptOfARealJob(t *testing.T) {
	defs := realAgents(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	srv := natstest.Server(t)
	wnc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer wnc.Close()
	gguf := filepath.Join(t.TempDir(), "lint.gguf")
	weights := []byte("GGUF\x03 a stand-in model file")
	if err := os.WriteFile(gguf, weights, 0o600); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(weights)
	digest := "sha256:" + hex.EncodeToString(sum[:])
	pool := montytest.Pool(t, monty.Config{Size: 1})
	root := t.TempDir()
	w, err := queue.NewWorker(queue.Config{Conn: wnc, Operations: []string{"lint"}, Slots: 1, Name: "tx-worker",
		Streams: ledger.StreamsConfig{AckWait: 30 * time.Second},
		NewHandler: func(int) (queue.Handler, error) {
			return jobrun.New(jobrun.Config{Agents: defs, Sandbox: pool, Model: oneTurnLint(), WorkspaceDir: root,
				ModelInfo: func(*agents.Definition) wire.ModelInfo {
					d, err := filedigest.SHA256(gguf)
					if err != nil {
						t.Error(err)
					}
					return wire.ModelInfo{Backend: "llama", Name: gguf, Digest: d}
				}})
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	cl, err := client.NewClient(nc, client.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}

	const job = "tx-real-1"
	// Nothing can be reviewed before it finished.
	if _, err := cl.Review(ctx, job, wire.VerdictAccepted, "ann", ""); !errors.Is(err, client.ErrNoResult) {
		t.Fatalf("review before the job exists: %v, want ErrNoResult", err)
	}
	if _, err := cl.Enqueue(ctx, demoRequest(t, job)); err != nil {
		t.Fatal(err)
	}
	res, err := cl.Wait(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	if res.State != wire.StateSucceeded || res.TranscriptSeq == 0 {
		t.Fatalf("result %s, transcript_seq %d", res.State, res.TranscriptSeq)
	}
	v, err := cl.Transcript(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	tr := v.Transcript
	if tr.JobID != job || tr.Operation != "lint" || tr.Agent != defs["lint"].Name || tr.Worker != "tx-worker" ||
		tr.Attempt != 1 || tr.Lease == 0 || tr.State != wire.StateSucceeded || tr.Status != fleettype.StatusSuccess {
		t.Fatalf("transcript header %+v", tr)
	}
	if tr.Model != (wire.ModelInfo{Backend: "llama", Name: gguf, Digest: digest}) {
		t.Fatalf("model %+v, want digest %s", tr.Model, digest)
	}
	if tr.Turns != res.Turns || tr.ToolCalls != res.ToolCalls || tr.Timings.Run != res.Timings.Run {
		t.Fatalf("outcome differs from the result: %+v vs %+v", tr, res)
	}
	offered := map[string]bool{}
	for _, tool := range tr.Tools {
		offered[tool.Name] = len(tool.Parameters) > 0
	}
	for _, tool := range defs["lint"].Tools {
		if !offered[tool.Name] {
			t.Errorf("tool %s not in the transcript's declarations (with parameters): %v", tool.Name, offered)
		}
	}
	// system, user (node context), assistant run_linter, its answer,
	// assistant submit_result, its answer.
	var roles []string
	var calls []string
	for _, m := range tr.Messages {
		roles = append(roles, string(m.Role))
		for _, c := range m.ToolCalls {
			calls = append(calls, c.Name)
		}
	}
	if len(calls) != 2 || calls[0] != "run_linter" || calls[1] != "submit_result" {
		t.Fatalf("calls %v (roles %v)", calls, roles)
	}
	if last := tr.Messages[len(tr.Messages)-1]; len(roles) != 6 || roles[0] != "system" || roles[1] != "user" ||
		last.Role != "tool" || last.Name != "submit_result" {
		t.Fatalf("roles %v", roles)
	}
	toolAnswers := 0
	for _, m := range tr.Messages {
		if m.Role == "tool" && m.Name == "run_linter" && m.ToolCallID == "call_1" && m.Content != "" {
			toolAnswers++
		}
	}
	if toolAnswers != 1 || v.Review != nil {
		t.Fatalf("run_linter answers %d, review %+v; roles %v", toolAnswers, v.Review, roles)
	}

	// A review is joined on read; the last one wins.
	if _, err := cl.Review(ctx, job, wire.VerdictRejected, "ann", "wrong fix"); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Review(ctx, job, wire.VerdictAccepted, "bob", ""); err != nil {
		t.Fatal(err)
	}
	if v, err = cl.Transcript(ctx, job); err != nil || v.Review == nil || v.Review.Verdict != wire.VerdictAccepted ||
		v.Review.Reviewer != "bob" || v.Transcript.Lease != tr.Lease {
		t.Fatalf("after review: %+v, %v", v, err)
	}
	// Bad reviews are refused before anything is published.
	if _, err := cl.Review(ctx, job, "maybe", "ann", ""); !errors.Is(err, wire.ErrInvalidRequest) {
		t.Fatalf("bad verdict: %v", err)
	}
	if _, err := cl.Review(ctx, job, wire.VerdictAccepted, " ", ""); !errors.Is(err, wire.ErrInvalidRequest) {
		t.Fatalf("no reviewer: %v", err)
	}
	if _, err := cl.Transcript(ctx, "tx-unknown"); !errors.Is(err, client.ErrNoResult) {
		t.Fatalf("unknown job: %v", err)
	}
}
