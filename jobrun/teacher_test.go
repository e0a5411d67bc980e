package jobrun_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/cairn/monty"
	"github.com/agentfleet/fleet/cairn/monty/montytest"
	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/inference/remote"
	"github.com/agentfleet/fleet/internal/testutil/chattest"
	"github.com/agentfleet/fleet/internal/testutil/natstest"
	"github.com/agentfleet/fleet/jobrun"
	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/queue"
	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/embedded"
	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// localModel is the worker's own model in the teacher tests: a teacher
// job must never reach it; other jobs get one submit_result.
type localModel struct {
	mu    sync.Mutex
	calls int
}

func (m *localModel) Complete(context.Context, *loop.Request) (*loop.Response, error) {
	m.mu.Lock()
	m.calls++
	m.mu.Unlock()
	return &loop.Response{Message: fleettype.Message{Role: fleettype.RoleAssistant, ToolCalls: []fleettype.ToolCall{{ID: "c1", Name: "submit_result",
		Arguments: json.RawMessage(`{"summary":"local","changed_files":[]}`)}}}, FinishReason: loop.FinishToolCalls}, nil
}

// startTeacherWorker runs a worker whose handlers have teacher (nil:
// none) and always.
func startTeacherWorker(t *testing.T, ctx context.Context, srv *embedded.Embedded, local loop.Model, teacher loop.Model,
	info wire.ModelInfo, always bool) {
	t.Helper()
	defs := realAgents(t)
	wnc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(wnc.Close)
	pool := montytest.Pool(t, monty.Config{Size: 1})
	root := t.TempDir()
	w, err := queue.NewWorker(queue.Config{Conn: wnc, Operations: []string{"lint"}, Slots: 1, Name: "teacher-worker",
		Streams: ledger.StreamsConfig{AckWait: 30 * time.Second},
		NewHandler: func(int) (queue.Handler, error) {
			return jobrun.New(jobrun.Config{Agents: defs, Sandbox: pool, Model: local, WorkspaceDir: root,
				Teacher: teacher, TeacherInfo: info, TeacherAlways: always,
				ModelInfo: func(*agents.Definition) wire.ModelInfo { return wire.ModelInfo{Backend: "llama", Name: "local.gguf"} }})
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop() })
}

func teacherClient(t *testing.T, srv *embedded.Embedded) *client.Client {
	t.Helper()
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	cl, err := client.NewClient(nc, client.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// lintTeacher is a teacher for the lint agent: fleet's remote backend
// against an OpenAI-compatible test server, and how results name it.
func lintTeacher(t *testing.T) (*chattest.Server, *remote.Model, wire.ModelInfo) {
	t.Helper()
	ts := chattest.NewLintTeacher(t, "teacher checked")
	teacher, err := remote.New(remote.Config{BaseURL: ts.BaseURL(), Model: "big-teacher", MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	return ts, teacher, wire.ModelInfo{Backend: "remote", Name: ts.URL + "/v1 big-teacher"}
}

// A job with options.teacher runs on the worker's teacher (the remote
// backend against an OpenAI-compatible server) and never on its own
// model; its transcript and result say it was a teacher run and name the
// teacher. A job without the option runs on the worker's own model.
func TestTeacherRunPerJob(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	srv := natstest.Server(t)
	ts, teacher, info := lintTeacher(t)
	local := &localModel{}
	startTeacherWorker(t, ctx, srv, local, teacher, info, false)
	cl := teacherClient(t, srv)

	req := demoRequest(t, "teach-1")
	req.Options.Teacher = true
	if _, err := cl.Enqueue(ctx, req); err != nil {
		t.Fatal(err)
	}
	res, err := cl.Wait(ctx, "teach-1")
	if err != nil {
		t.Fatal(err)
	}
	if res.State != wire.StateSucceeded || res.Summary != "teacher checked" || res.Teacher != info.Name {
		t.Fatalf("teacher job: %s %q teacher %q (%s)", res.State, res.Summary, res.Teacher, res.Error)
	}
	if got := ts.Models(); len(got) != 2 || got[0] != "big-teacher" || ts.MaxTools() == 0 {
		t.Fatalf("teacher server saw %v (tools %d)", got, ts.MaxTools())
	}
	v, err := cl.Transcript(ctx, "teach-1")
	if err != nil {
		t.Fatal(err)
	}
	if !v.Transcript.Teacher || v.Transcript.Model != info || v.Transcript.AgentDigest == "" {
		t.Fatalf("transcript teacher %v model %+v digest %q", v.Transcript.Teacher, v.Transcript.Model, v.Transcript.AgentDigest)
	}

	// Without the option: the worker's own model, no teacher named.
	if _, err := cl.Enqueue(ctx, demoRequest(t, "teach-2")); err != nil {
		t.Fatal(err)
	}
	res, err = cl.Wait(ctx, "teach-2")
	if err != nil {
		t.Fatal(err)
	}
	local.mu.Lock()
	calls := local.calls
	local.mu.Unlock()
	if res.State != wire.StateSucceeded || res.Summary != "local" || res.Teacher != "" || calls != 1 || len(ts.Models()) != 2 {
		t.Fatalf("local job: %s %q teacher %q; local calls %d, teacher calls %d", res.State, res.Summary, res.Teacher, calls, len(ts.Models()))
	}
	if v2, err := cl.Transcript(ctx, "teach-2"); err != nil || v2.Transcript.Teacher || v2.Transcript.Model.Name != "local.gguf" ||
		v2.Transcript.AgentDigest != v.Transcript.AgentDigest {
		t.Fatalf("local transcript %+v %v", v, err)
	}
}

// A teacher worker (always) runs every job on its teacher.
func TestTeacherRunPerWorker(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	srv := natstest.Server(t)
	ts, teacher, info := lintTeacher(t)
	local := &localModel{}
	startTeacherWorker(t, ctx, srv, local, teacher, info, true)
	cl := teacherClient(t, srv)
	if _, err := cl.Enqueue(ctx, demoRequest(t, "teach-w")); err != nil {
		t.Fatal(err)
	}
	res, err := cl.Wait(ctx, "teach-w")
	if err != nil {
		t.Fatal(err)
	}
	local.mu.Lock()
	calls := local.calls
	local.mu.Unlock()
	if res.State != wire.StateSucceeded || res.Teacher != info.Name || len(ts.Models()) != 2 || calls != 0 {
		t.Fatalf("job on a teacher worker: %s teacher %q, teacher calls %d, local calls %d", res.State, res.Teacher, len(ts.Models()), calls)
	}
	if _, err := jobrun.New(jobrun.Config{Agents: realAgents(t), Sandbox: montytest.Pool(t, monty.Config{Size: 1}), Model: local,
		WorkspaceDir: t.TempDir(), TeacherAlways: true}); !errors.Is(err, jobrun.ErrInvalidConfig) {
		t.Fatalf("TeacherAlways without a Teacher: %v", err)
	}
}

// A worker without a teacher refuses a teacher job before running it:
// QUEUE_008, a dead result, and the request kept in the DLQ for a replay.
func TestTeacherJobWithoutTeacher(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	srv := natstest.Server(t)
	local := &localModel{}
	startTeacherWorker(t, ctx, srv, local, nil, wire.ModelInfo{}, false)
	cl := teacherClient(t, srv)
	req := demoRequest(t, "teach-none")
	req.Options.Teacher = true
	if _, err := cl.Enqueue(ctx, req); err != nil {
		t.Fatal(err)
	}
	res, err := cl.Wait(ctx, "teach-none")
	if err != nil {
		t.Fatal(err)
	}
	local.mu.Lock()
	calls := local.calls
	local.mu.Unlock()
	if res.State != wire.StateDead || res.ErrorCode != wire.CodeNoTeacher || res.Attempts != 1 || calls != 0 {
		t.Fatalf("result %s %s %q attempts %d, local calls %d", res.State, res.ErrorCode, res.Error, res.Attempts, calls)
	}
	d, err := cl.DeadLetter(ctx, "teach-none")
	if err != nil {
		t.Fatal(err)
	}
	if d.Code != wire.CodeNoTeacher || d.JobID != "teach-none" {
		t.Fatalf("dead letter %+v", d)
	}
	if _, err := cl.Transcript(ctx, "teach-none"); !errors.Is(err, client.ErrNoTranscript) {
		t.Fatalf("a refused job has a transcript: %v", err)
	}
}
