package wire

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/vmihailenco/msgpack/v5"
)

func sampleRequest() *RunRequest {
	return &RunRequest{
		Version:   1,
		JobID:     "job-42",
		Operation: "lint",
		Node: Node{ID: "src/app.py::load", Name: "load", Type: "function",
			FilePath: "src/app.py", Text: "def load():\n    return 1\n"},
		Files:     map[string]string{"src/app.py": "def load():\n    return 1\n", "pyproject.toml": "[tool.ruff]\n"},
		Options:   RunOptions{MaxTurns: 6, StepTimeoutMS: 30000, TotalTimeoutMS: 300000, ToolTimeoutMS: 10000},
		CreatedAt: time.Date(2026, 11, 21, 23, 0, 0, 0, time.UTC),
	}
}

func TestRequestRoundTrip(t *testing.T) {
	t.Parallel()
	for _, enc := range []Encoding{JSON, Msgpack} {
		t.Run(enc.String(), func(t *testing.T) {
			t.Parallel()
			want := sampleRequest()
			m, err := NewRequestMsg(want, enc, "coord.inbox.7")
			if err != nil {
				t.Fatal(err)
			}
			if m.Subject != "agents.run.lint" || m.Header.Get(HeaderMsgID) != "job-42" ||
				m.Header.Get(HeaderContentType) != enc.ContentType() || m.Header.Get(HeaderProtocol) != "1" ||
				m.Header.Get(HeaderReplyTo) != "coord.inbox.7" {
				t.Fatalf("bad message: %s %v", m.Subject, m.Header)
			}
			got, err := DecodeRunRequest(m.Data, m.Header.Get(HeaderContentType))
			if err != nil {
				t.Fatal(err)
			}
			if got.JobID != want.JobID || got.Node != want.Node || len(got.Files) != 2 ||
				got.Files["pyproject.toml"] != want.Files["pyproject.toml"] || got.Options != want.Options ||
				!got.CreatedAt.Equal(want.CreatedAt) {
				t.Fatalf("round trip changed the request:\n got %+v\nwant %+v", got, want)
			}
		})
	}
}

func TestJSONFieldNames(t *testing.T) {
	t.Parallel()
	// The wire names are the protocol: PROTOCOL.md's example must decode.
	body := `{"version":1,"job_id":"j1","operation":"lint",
	  "node":{"id":"a.py::f","name":"f","type":"function","file_path":"a.py","text":"def f(): pass\n"},
	  "files":{"a.py":"def f(): pass\n"},
	  "options":{"max_turns":4,"step_timeout_ms":1000,"total_timeout_ms":5000,"tool_timeout_ms":500},
	  "created_at":"2026-11-21T23:00:00Z"}`
	r, err := DecodeRunRequest([]byte(body), "application/json; charset=utf-8")
	if err != nil {
		t.Fatal(err)
	}
	if r.Node.FilePath != "a.py" || r.Options.MaxTurns != 4 || r.Options.ToolTimeout() != 500*time.Millisecond {
		t.Fatalf("decoded %+v", r)
	}
	res := AgentResult{Version: 1, JobID: "j1", State: StateSucceeded,
		Result: fleettype.Result{Status: fleettype.StatusSuccess,
			ChangedFiles: []string{"a.py"}}, Timings: ResultTimings{Queued: time.Millisecond}}
	b, _ := json.Marshal(res)
	for _, k := range []string{`"job_id":"j1"`, `"state":"succeeded"`, `"status":"success"`, `"queued_ns":1000000`, `"changed_files":["a.py"]`} {
		if !strings.Contains(string(b), k) {
			t.Errorf("result JSON %s lacks %s", b, k)
		}
	}
	ev := Event{JobID: "j1", Attempt: 2, Event: fleettype.Event{Kind: fleettype.EventTurnStarted, Seq: 1, Turn: 1}}
	b, _ = json.Marshal(ev)
	for _, k := range []string{`"job_id":"j1"`, `"attempt":2`, `"kind":"turn_started"`, `"seq":1`} {
		if !strings.Contains(string(b), k) {
			t.Errorf("event JSON %s lacks %s", b, k)
		}
	}
}

func TestResultAndEventBothEncodings(t *testing.T) {
	t.Parallel()
	res := &AgentResult{Version: 1, JobID: "j1", Operation: "lint", State: StateFailed,
		Result: fleettype.Result{Status: fleettype.StatusFailed, Error: "AGENT_003: Turn limit (6) exceeded",
			ErrorCode: fleettype.ErrorCode("AGENT_003"), Turns: 6, Usage: fleettype.Usage{PromptTokens: 10,
				CompletionTokens: 3}}, Worker: "w1", Attempts: 2, Diff: "--- a/x\n+++ b/x\n"}
	ev := &Event{JobID: "j1", Attempt: 1, Event: fleettype.Event{Kind: fleettype.EventToolCall, Seq: 3,
		Turn: 1, Tool: "ruff", Arguments: json.RawMessage(`{"fix":true}`)}}
	for _, enc := range []Encoding{JSON, Msgpack} {
		b, err := enc.Marshal(res)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeAgentResult(b, enc.ContentType())
		if err != nil {
			t.Fatal(err)
		}
		if got.ErrorCode != res.ErrorCode || got.Usage != res.Usage || got.Diff != res.Diff || got.Attempts != 2 {
			t.Fatalf("%s: result %+v", enc, got)
		}
		b, err = enc.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		ge, err := DecodeEvent(b, enc.ContentType())
		if err != nil {
			t.Fatal(err)
		}
		if ge.JobID != "j1" || ge.Kind != fleettype.EventToolCall || ge.Tool != "ruff" || string(ge.Arguments) != `{"fix":true}` {
			t.Fatalf("%s: event %+v", enc, ge)
		}
	}
	// msgpack keys are the JSON names.
	b, _ := msgpack.Marshal(ev)
	var m map[string]any
	if err := msgpack.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m["job_id"] != "j1" || m["kind"] != "tool_call" {
		t.Fatalf("msgpack event keys: %v", m)
	}
}

func TestEncodingFor(t *testing.T) {
	t.Parallel()
	for ct, want := range map[string]Encoding{"": JSON, "application/json": JSON, "Application/JSON; charset=utf-8": JSON,
		"application/msgpack": Msgpack, "application/x-msgpack": Msgpack} {
		got, err := EncodingFor(ct)
		if err != nil || got != want {
			t.Errorf("EncodingFor(%q) = %v, %v", ct, got, err)
		}
	}
	_, err := EncodingFor("text/plain")
	if !errors.Is(err, ErrUndecodable) {
		t.Fatalf("text/plain: %v", err)
	}
}

func TestDecodeRefusals(t *testing.T) {
	t.Parallel()
	enc := func(mut func(r *RunRequest)) []byte {
		r := sampleRequest()
		mut(r)
		b, _ := json.Marshal(r)
		return b
	}
	mp := func(v any) []byte { b, _ := msgpack.Marshal(v); return b }
	cases := []struct {
		name, ct string
		data     []byte
		want     error
		field    string
	}{
		{"empty", "", nil, ErrUndecodable, ""},
		{"not json", "", []byte("hello"), ErrUndecodable, ""},
		{"json array", "", []byte("[1,2]"), ErrUndecodable, ""},
		{"trailing json", "", append(enc(func(*RunRequest) {}), []byte(" {}")...), ErrUndecodable, ""},
		{"wrong type", "", []byte(`{"job_id":7}`), ErrUndecodable, "job_id"},
		{"bad content type", "text/plain", enc(func(*RunRequest) {}), ErrUndecodable, HeaderContentType},
		{"msgpack garbage", ContentTypeMsgpack, []byte{0xc1, 0x00}, ErrUndecodable, ""},
		{"msgpack trailing", ContentTypeMsgpack, append(mp(sampleRequest()), 0x01), ErrUndecodable, ""},
		{"version", "", enc(func(r *RunRequest) { r.Version = 2 }), ErrInvalidRequest, "version"},
		{"no job id", "", enc(func(r *RunRequest) { r.JobID = "" }), ErrInvalidRequest, "job_id"},
		{"job id dot", "", enc(func(r *RunRequest) { r.JobID = "a.b" }), ErrInvalidRequest, "job_id"},
		{"job id wildcard", "", enc(func(r *RunRequest) { r.JobID = "a*" }), ErrInvalidRequest, "job_id"},
		{"job id long", "", enc(func(r *RunRequest) { r.JobID = strings.Repeat("a", 129) }), ErrInvalidRequest, "job_id"},
		{"op upper", "", enc(func(r *RunRequest) { r.Operation = "Lint" }), ErrInvalidRequest, "operation"},
		{"node type", "", enc(func(r *RunRequest) { r.Node.Type = "module" }), ErrInvalidRequest, "node.type"},
		{"node path abs", "", enc(func(r *RunRequest) { r.Node.FilePath = "/etc/passwd" }), ErrInvalidRequest, "node.file_path"},
		{"file dotdot", "", enc(func(r *RunRequest) { r.Files["../x.py"] = "" }), ErrInvalidRequest, "files"},
		{"file inner dotdot", "", enc(func(r *RunRequest) { r.Files["a/../../x.py"] = "" }), ErrInvalidRequest, "files"},
		{"file abs", "", enc(func(r *RunRequest) { r.Files["/x.py"] = "" }), ErrInvalidRequest, "files"},
		{"file backslash", "", enc(func(r *RunRequest) { r.Files[`a\..\x`] = "" }), ErrInvalidRequest, "files"},
		{"file unclean", "", enc(func(r *RunRequest) { r.Files["a//x"] = "" }), ErrInvalidRequest, "files"},
		{"max turns", "", enc(func(r *RunRequest) { r.Options.MaxTurns = -1 }), ErrInvalidRequest, "options.max_turns"},
		{"timeout", "", enc(func(r *RunRequest) { r.Options.ToolTimeoutMS = -5 }), ErrInvalidRequest, "options.tool_timeout_ms"},
		{"total<step", "", enc(func(r *RunRequest) { r.Options.TotalTimeoutMS = 10 }), ErrInvalidRequest, "options.total_timeout_ms"},
		{"msgpack bad utf8", ContentTypeMsgpack, mp(func() *RunRequest {
			r := sampleRequest()
			r.Files["a.py"] = "\xff\xfe"
			return r
		}()), ErrInvalidRequest, `files["a.py"]`},
		{"too big", "", make([]byte, MaxRequestBytes+1), ErrInvalidRequest, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := DecodeRunRequest(c.data, c.ct)
			if !errors.Is(err, c.want) {
				t.Fatalf("err = %v, want %v", err, c.want)
			}
			var re *RequestError
			if !errors.As(err, &re) || re.Field != c.field {
				t.Fatalf("err = %#v, want field %q", err, c.field)
			}
			if !strings.HasPrefix(err.Error(), string(re.Code)+": ") {
				t.Fatalf("error %q does not start with its code", err)
			}
		})
	}
}

func TestValidateReplyTo(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"_INBOX.abc", "coord.replies.j1"} {
		if err := ValidateReplyTo(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a..b", "a.*", "a.>", "a b", "agents.results.x", "agents", strings.Repeat("a", 300)} {
		if err := ValidateReplyTo(bad); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

func TestJobStateTerminal(t *testing.T) {
	t.Parallel()
	for s, want := range map[JobState]bool{StateQueued: false, StateRunning: false, StateSucceeded: true,
		StateFailed: true, StateDead: true, StateCanceled: true} {
		if s.Terminal() != want {
			t.Errorf("%s.Terminal() = %v", s, !want)
		}
	}
}

// FuzzDecodeRunRequest feeds arbitrary bytes to both decoders: they must
// never panic, and whatever they accept must validate and re-encode to an
// equal request.
func FuzzDecodeRunRequest(f *testing.F) {
	good, _ := json.Marshal(sampleRequest())
	f.Add(good, false)
	gm, _ := msgpack.Marshal(sampleRequest())
	f.Add(gm, true)
	f.Add([]byte(`{"job_id":"a","operation":"b","files":{"../x":""}}`), false)
	f.Add([]byte{0x81, 0xa6, 'j', 'o', 'b', '_', 'i', 'd', 0xdd, 0xff, 0xff, 0xff, 0xff}, true)
	f.Add([]byte(`{"job_id":"a","operation":"b","node":{"text":"\ud800"}}`), false)
	f.Fuzz(func(t *testing.T, data []byte, useMsgpack bool) {
		ct := ContentTypeJSON
		enc := JSON
		if useMsgpack {
			ct, enc = ContentTypeMsgpack, Msgpack
		}
		req, err := DecodeRunRequest(data, ct)
		if err != nil {
			var re *RequestError
			if !errors.As(err, &re) {
				t.Fatalf("error is not a *RequestError: %T %v", err, err)
			}
			return
		}
		if err := req.Validate(); err != nil {
			t.Fatalf("accepted request does not validate: %v", err)
		}
		b, err := enc.Marshal(req)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		again, err := DecodeRunRequest(b, ct)
		if err != nil {
			t.Fatalf("re-decode of an accepted request failed: %v", err)
		}
		if again.JobID != req.JobID || again.Operation != req.Operation || again.Node != req.Node || len(again.Files) != len(req.Files) {
			t.Fatalf("re-decode differs: %+v vs %+v", again, req)
		}
	})
}
