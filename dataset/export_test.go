package dataset_test

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/cairn/monty"
	"github.com/agentfleet/fleet/cairn/monty/montytest"
	"github.com/agentfleet/fleet/cairn/pym"
	"github.com/agentfleet/fleet/dataset"
	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/inference/functiongemma"
	"github.com/agentfleet/fleet/internal/testutil/natstest"
	"github.com/agentfleet/fleet/jobrun"
	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/loop/looptest"
	"github.com/agentfleet/fleet/queue"
	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// promptRecorder is a model wrapper that keeps the prompt of every call as
// the local backend builds it (functiongemma.RenderSegments, the segments
// inference/llama tokenizes), joined.
type promptRecorder struct {
	inner   loop.Model
	mu      sync.Mutex
	prompts []string
}

func (r *promptRecorder) Complete(ctx context.Context, req *loop.Request) (*loop.Response, error) {
	segs, err := functiongemma.RenderSegments(req)
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	for _, s := range segs {
		b.WriteString(s.Text)
	}
	r.mu.Lock()
	r.prompts = append(r.prompts, b.String())
	r.mu.Unlock()
	return r.inner.Complete(ctx, req)
}

// take returns the prompts recorded since the last take.
func (r *promptRecorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.prompts
	r.prompts = nil
	return p
}

// lintModel runs the lint agent in two turns: text and run_linter, then
// submit_result. The arguments are written the way a model may write
// them (spaces, keys out of order): the next prompt shows them as the
// renderer writes them.
//
// On a file named long.py it never submits until the loop's last-chance
// turn offers submit_result alone.
func lintModel(summary string) loop.Model {
	s := looptest.NewScripted(looptest.Func(func(_ context.Context, req *loop.Request) (*loop.Response, error) {
		msg := fleettype.Message{Role: fleettype.RoleAssistant, Content: "I will lint the file first.",
			ToolCalls: []fleettype.ToolCall{{Name: "run_linter", Arguments: json.RawMessage(`{ }`)}}}
		n := len(req.Messages)
		if strings.Contains(summary, "long.py") && len(req.Tools) > 1 {
			if n > 0 && req.Messages[n-1].Role == fleettype.RoleTool {
				msg.ToolCalls[0].Name = "read_current_file"
			}
		} else if n > 0 && req.Messages[n-1].Role == fleettype.RoleTool || len(req.Tools) == 1 {
			msg = fleettype.Message{Role: fleettype.RoleAssistant, ToolCalls: []fleettype.ToolCall{{Name: "submit_result",
				Arguments: json.RawMessage(`{"summary": "` + summary + `", "changed_files": [], "details": {"issues_remaining": 0, "issues_fixed": 0}}`)}}}
		}
		return &loop.Response{Message: msg, FinishReason: loop.FinishToolCalls}, nil
	}))
	s.RepeatLast = true
	return s
}

type fleet struct {
	cl  *client.Client
	nc  *nats.Conn
	rec *promptRecorder
}

func startFleet(t *testing.T, ctx context.Context) *fleet {
	t.Helper()
	defs, err := agents.LoadDirWith("../agents", agents.LoadOptions{SchemaFromPym: pym.SchemaFromFile})
	if err != nil {
		t.Fatal(err)
	}
	srv := natstest.Server(t)
	wnc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(wnc.Close)
	pool := montytest.Pool(t, monty.Config{Size: 1})
	rec := &promptRecorder{}
	rec.inner = modelFunc(func(ctx context.Context, req *loop.Request) (*loop.Response, error) {
		return lintModel(summaryOf(req)).Complete(ctx, req)
	})
	root := t.TempDir()
	w, err := queue.NewWorker(queue.Config{Conn: wnc, Operations: []string{"lint"}, Slots: 1, Name: "ds-worker",
		Streams: ledger.StreamsConfig{AckWait: 30 * time.Second},
		NewHandler: func(int) (queue.Handler, error) {
			return jobrun.New(jobrun.Config{Agents: defs, Sandbox: pool, Model: rec, WorkspaceDir: root,
				ModelInfo: func(*agents.Definition) wire.ModelInfo {
					return wire.ModelInfo{Backend: "llama", Name: "lint.gguf", Digest: "sha256:00aa"}
				}})
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop() })
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	cl, err := client.NewClient(nc, client.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return &fleet{cl: cl, nc: nc, rec: rec}
}

type modelFunc func(ctx context.Context, req *loop.Request) (*loop.Response, error)

func (f modelFunc) Complete(ctx context.Context, req *loop.Request) (*loop.Response, error) {
	return f(ctx, req)
}

// summaryOf names the run by its node's file: each job says which it was.
func summaryOf(req *loop.Request) string {
	for _, m := range req.Messages {
		if m.Role == fleettype.RoleUser {
			if i := strings.Index(m.Content, "File: "); i >= 0 {
				return "checked " + strings.Fields(m.Content[i+6:])[0]
			}
		}
	}
	return "checked"
}

func lintJob(t *testing.T, jobID, path, text string) *wire.RunRequest {
	t.Helper()
	py, err := os.ReadFile(filepath.Join("../testdata/demo", "pyproject.toml"))
	if err != nil {
		t.Fatal(err)
	}
	return &wire.RunRequest{Version: 1, JobID: jobID, Operation: "lint",
		Node:  wire.Node{ID: path, Name: filepath.Base(path), Type: "file", FilePath: path, Text: text},
		Files: map[string]string{path: text, "pyproject.toml": string(py)}}
}

// run runs a job to its end and returns the prompts the model was given.
func (f *fleet) run(t *testing.T, ctx context.Context, req *wire.RunRequest) []string {
	t.Helper()
	if _, err := f.cl.Enqueue(ctx, req); err != nil {
		t.Fatal(err)
	}
	res, err := f.cl.Wait(ctx, req.JobID)
	if err != nil {
		t.Fatal(err)
	}
	if res.State != wire.StateSucceeded || res.TranscriptSeq == 0 {
		t.Fatalf("job %s: %s %s (transcript %d)", req.JobID, res.State, res.Error, res.TranscriptSeq)
	}
	return f.rec.take()
}

func export(t *testing.T, ctx context.Context, cl *client.Client, opts dataset.Options) ([]byte, *dataset.Summary) {
	t.Helper()
	var out bytes.Buffer
	sum, err := dataset.Export(ctx, cl, &out, opts)
	if err != nil {
		t.Fatal(err)
	}
	return out.Bytes(), sum
}

func lines[T any](t *testing.T, b []byte) []T {
	t.Helper()
	var out []T
	for _, l := range bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n")) {
		if len(l) == 0 {
			continue
		}
		var v T
		if err := json.Unmarshal(l, &v); err != nil {
			t.Fatalf("record %s: %v", l, err)
		}
		out = append(out, v)
	}
	return out
}

// byteOffset converts a code-point offset of s into a byte offset.
func byteOffset(s string, runes int) int {
	i := 0
	for n := 0; n < runes; n++ {
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
	}
	return i
}

// Real jobs (a worker on an embedded server, the real lint agent and its
// .pym tools on Monty) recorded the prompt of every model call as the
// local backend renders it. The exported text records hold those prompts
// byte for byte before each model span; the conversational records render
// to the same text; reviews and filters select; corrupt and truncated
// records are dropped, counted, and the export goes on; the output is the
// same twice.
func TestExportMatchesTheModelsPrompts(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	f := startFleet(t, ctx)
	// Non-ASCII text: spans are in code points, prompts compared in bytes.
	src := "def café(x):\n    return  x  # «naïve»   \n"
	prompts := map[string][]string{
		"ds-a": f.run(t, ctx, lintJob(t, "ds-a", "src/a.py", src)),
		"ds-b": f.run(t, ctx, lintJob(t, "ds-b", "src/b.py", "import os\nx=1\n")),
		"ds-c": f.run(t, ctx, lintJob(t, "ds-c", "src/c.py", "y = 2\n")),
	}
	for id, p := range prompts {
		if len(p) != 2 {
			t.Fatalf("job %s: %d model calls, want 2", id, len(p))
		}
	}
	// A run that reaches its turn limit: its last prompt offers only
	// submit_result, which its record could not show.
	long := lintJob(t, "ds-long", "src/long.py", "z = 3\n")
	long.Options.MaxTurns = 2
	if p := f.run(t, ctx, long); len(p) != 3 {
		t.Fatalf("turn-limited job: %d model calls, want 3", len(p))
	}
	if v, err := f.cl.Transcript(ctx, "ds-long"); err != nil || !v.Transcript.LastChance {
		t.Fatalf("turn-limited transcript: %v", err)
	}
	if p := f.run(t, ctx, lintJob(t, "ds-d", "src/d.py", "w = 4\n")); len(p) != 2 {
		t.Fatalf("ds-d: %d model calls", len(p))
	}
	if _, err := f.cl.Review(ctx, "ds-a", wire.VerdictAccepted, "ann", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := f.cl.Review(ctx, "ds-b", wire.VerdictRejected, "ann", "no"); err != nil {
		t.Fatal(err)
	}
	// Hostile records: garbage, and a real transcript cut in half.
	good, err := f.cl.Transcript(ctx, "ds-a")
	if err != nil {
		t.Fatal(err)
	}
	whole, _ := json.Marshal(good.Transcript)
	js, err := jetstream.New(f.nc)
	if err != nil {
		t.Fatal(err)
	}
	// A stale attempt of ds-a (its result names the other one), a
	// transcript whose contents were cut, and a corrupt last review of
	// ds-d.
	stale := *good.Transcript
	stale.Lease, stale.Worker = 1, "stale"
	staleJSON, _ := json.Marshal(&stale)
	cut := *good.Transcript
	cut.JobID, cut.Truncated = "ds-cut", true
	cutJSON, _ := json.Marshal(&cut)
	for subj, data := range map[string][]byte{
		wire.TranscriptSubject("ds-bad-1"): []byte("\x00not json"),
		wire.TranscriptSubject("ds-bad-2"): whole[:len(whole)/2],
		wire.TranscriptSubject("ds-a"):     staleJSON,
		wire.TranscriptSubject("ds-cut"):   cutJSON,
		wire.ReviewSubject("ds-d"):         []byte(`{"version":1,"job_id":"ds-d","verdict":"acc`),
	} {
		if _, err := js.Publish(ctx, subj, data); err != nil {
			t.Fatal(err)
		}
	}

	all := dataset.Filter{Verdicts: []string{"accepted", "rejected", dataset.Unreviewed}}
	text, sum := export(t, ctx, f.cl, dataset.Options{Format: dataset.FormatText, Filter: all})
	want := map[string]int{dataset.DropCorrupt: 2, dataset.DropLastChance: 1, dataset.DropSuperseded: 1,
		dataset.DropCutContents: 1, dataset.DropBadReview: 1}
	if sum.Kept != 3 || sum.Jobs != 8 || sum.Transcripts != 9 || sum.Reviews != 3 || !maps.Equal(sum.Dropped, want) {
		t.Fatalf("summary %+v", sum)
	}
	recs := lines[dataset.Rendered](t, text)
	for _, r := range recs {
		p := prompts[r.Fleet.JobID]
		if len(r.ModelSpans) != len(p) {
			t.Fatalf("%s: %d spans, %d model calls", r.Fleet.JobID, len(r.ModelSpans), len(p))
		}
		for k, span := range r.ModelSpans {
			start, end := byteOffset(r.Text, span[0]), byteOffset(r.Text, span[1])
			if r.Text[:start] != p[k] {
				t.Fatalf("%s call %d: text before the span differs from the prompt\ntext:   %q\nprompt: %q", r.Fleet.JobID, k+1, r.Text[:start], p[k])
			}
			if !strings.HasSuffix(r.Text[start:end], functiongemma.TokStartFunctionResponse) ||
				!strings.Contains(r.Text[start:end], functiongemma.TokStartFunctionCall) {
				t.Fatalf("%s span %d: %q", r.Fleet.JobID, k, r.Text[start:end])
			}
		}
		if r.Fleet.AgentDigest == "" || r.Fleet.Model.Digest != "sha256:00aa" || r.Fleet.State != wire.StateSucceeded {
			t.Fatalf("meta %+v", r.Fleet)
		}
	}
	// The arguments as the model wrote them are not in the text; the
	// renderer's form is (and so was it in the second prompt).
	if strings.Contains(string(text), `"summary": "`) || !strings.Contains(prompts["ds-a"][1], "call:run_linter{}") {
		t.Fatalf("arguments not in the renderer's form:\n%s", prompts["ds-a"][1])
	}

	msgs, _ := export(t, ctx, f.cl, dataset.Options{Format: dataset.FormatMessages, Filter: all})
	convs := lines[dataset.Conversation](t, msgs)
	if len(convs) != len(recs) {
		t.Fatalf("%d conversational records, %d text records", len(convs), len(recs))
	}
	for i, c := range convs {
		if c.Fleet.JobID != recs[i].Fleet.JobID {
			t.Fatalf("record %d: job %s vs %s: the order differs", i, c.Fleet.JobID, recs[i].Fleet.JobID)
		}
		req, err := c.Request()
		if err != nil {
			t.Fatal(err)
		}
		back, err := functiongemma.Render(req)
		if err != nil || back != recs[i].Text {
			t.Fatalf("%s: the conversational record renders differently (%v)\n%q\n%q", c.Fleet.JobID, err, back, recs[i].Text)
		}
		for _, m := range c.Messages {
			for _, call := range m.ToolCalls {
				if call.Type != "function" || !json.Valid(call.Function.Arguments) || call.Function.Arguments[0] != '{' {
					t.Fatalf("call %+v", call)
				}
			}
		}
		if c.Tools[0].Type != "function" || c.Tools[0].Function.Name == "" || len(c.Tools[0].Function.Parameters) == 0 {
			t.Fatalf("tools %+v", c.Tools)
		}
	}

	// The default a trainer wants: accepted only.
	acc, sum := export(t, ctx, f.cl, dataset.Options{Format: dataset.FormatText,
		Filter: dataset.Filter{Verdicts: []string{"accepted"}}})
	if got := lines[dataset.Rendered](t, acc); len(got) != 1 || got[0].Fleet.JobID != "ds-a" || got[0].Fleet.Verdict != wire.VerdictAccepted ||
		sum.Dropped["filtered out: review verdict"] != 4 || sum.Kept != 1 {
		t.Fatalf("accepted only: %d records, %+v", len(got), sum)
	}
	// Other filters: a model digest, an agent version, a time range.
	for _, c := range []struct {
		f    dataset.Filter
		want int
	}{
		{dataset.Filter{Model: "sha256:00a"}, 3}, // the turn-limited job is dropped anyway
		{dataset.Filter{Model: "other"}, 0},
		{dataset.Filter{AgentVersion: recs[0].Fleet.AgentDigest[:15]}, 3},
		{dataset.Filter{AgentVersion: "sha256:ffff"}, 0},
		{dataset.Filter{Operations: []string{"test"}}, 0},
		{dataset.Filter{Until: time.Now().Add(-time.Hour)}, 0},
		{dataset.Filter{Since: time.Now().Add(-time.Hour), States: []wire.JobState{wire.StateSucceeded}}, 3},
	} {
		out, _ := export(t, ctx, f.cl, dataset.Options{Format: dataset.FormatText, Filter: c.f})
		if n := len(lines[dataset.Rendered](t, out)); n != c.want {
			t.Errorf("filter %+v: %d records, want %d", c.f, n, c.want)
		}
	}
	// Deterministic: the same bytes again; and without metadata.
	again, _ := export(t, ctx, f.cl, dataset.Options{Format: dataset.FormatText, Filter: all})
	if !bytes.Equal(again, text) {
		t.Fatal("a second export differs")
	}
	bare, _ := export(t, ctx, f.cl, dataset.Options{Format: dataset.FormatMessages, Filter: all, NoMeta: true})
	if bytes.Contains(bare, []byte(`"fleet"`)) || len(lines[dataset.Conversation](t, bare)) != 3 {
		t.Fatalf("--no-meta:\n%s", bare)
	}
}
