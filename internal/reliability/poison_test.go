package reliability

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/internal/testutil"
	"github.com/agentfleet/fleet/queue/wire"
)

// poison is one hostile request and the terminal code it must get.
type poison struct {
	name  string
	msgID string // Nats-Msg-Id header ("" = none)
	ctype string // Content-Type header ("" = none, JSON)
	body  []byte
	subj  string // "" = agents.run.lint
	code  fleettype.ErrorCode
	// result: a dead result is stored under msgID (the id is usable).
	result bool
}

func jsonReq(mut func(m map[string]any)) []byte {
	m := map[string]any{"version": 1, "job_id": "", "operation": "lint",
		"node":  map[string]any{"id": "a.py::f", "name": "f", "type": "function", "file_path": "a.py", "text": "def f(): pass\n"},
		"files": map[string]string{"a.py": "def f(): pass\n"}}
	mut(m)
	b, err := wire.JSON.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

func msgpackReq(mut func(m map[string]any)) []byte {
	m := map[string]any{"version": 1, "job_id": "", "operation": "lint",
		"node":  map[string]any{"id": "a.py::f", "name": "f", "type": "function", "file_path": "a.py", "text": "def f(): pass\n"},
		"files": map[string]string{"a.py": "def f(): pass\n"}}
	mut(m)
	b, err := msgpack.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

func poisonBattery() []poison {
	id := func(s string) func(m map[string]any) { return func(m map[string]any) { m["job_id"] = s } }
	with := func(s string, f func(m map[string]any)) func(m map[string]any) {
		return func(m map[string]any) { m["job_id"] = s; f(m) }
	}
	manyFiles := map[string]string{}
	for i := 0; i <= wire.MaxFiles; i++ {
		manyFiles[fmt.Sprintf("f%04d.py", i)] = ""
	}
	return []poison{
		{name: "wrong types", msgID: "p-types", body: []byte(`{"version":1,"job_id":"p-types","operation":"lint","node":{"id":7},"files":["a.py"],"options":{"max_turns":"ten"}}`),
			code: wire.CodeUndecodable, result: true},
		{name: "job id a number", msgID: "p-numid", body: []byte(`{"version":1,"job_id":12345,"operation":"lint"}`),
			code: wire.CodeUndecodable, result: true},
		{name: "huge node name", msgID: "p-huge-name", body: jsonReq(with("p-huge-name", func(m map[string]any) {
			m["node"].(map[string]any)["name"] = strings.Repeat("n", 200_000)
		})), code: wire.CodeInvalidRequest, result: true},
		{name: "too many files", msgID: "p-many-files", body: jsonReq(with("p-many-files", func(m map[string]any) { m["files"] = manyFiles })),
			code: wire.CodeInvalidRequest, result: true},
		{name: "huge max_turns", msgID: "p-turns", body: jsonReq(with("p-turns", func(m map[string]any) { m["options"] = map[string]any{"max_turns": 1 << 40} })),
			code: wire.CodeInvalidRequest, result: true},
		{name: "negative timeout", msgID: "p-timeout", body: jsonReq(with("p-timeout", func(m map[string]any) { m["options"] = map[string]any{"tool_timeout_ms": -1} })),
			code: wire.CodeInvalidRequest, result: true},
		{name: "unknown operation in body", msgID: "p-op", body: jsonReq(with("p-op", func(m map[string]any) { m["operation"] = "format_disk" })),
			code: wire.CodeUnknownOperation, result: true},
		{name: "unsupported version", msgID: "p-version", body: jsonReq(with("p-version", func(m map[string]any) { m["version"] = 99 })),
			code: wire.CodeInvalidRequest, result: true},
		{name: "invalid utf-8 (msgpack)", msgID: "p-utf8", ctype: wire.ContentTypeMsgpack, body: msgpackReq(with("p-utf8", func(m map[string]any) {
			m["files"] = map[string]string{"a.py": "x = '\xff\xfe'\n"}
		})), code: wire.CodeInvalidRequest, result: true},
		{name: "invalid utf-8 path (msgpack)", msgID: "p-utf8-path", ctype: wire.ContentTypeMsgpack, body: msgpackReq(with("p-utf8-path", func(m map[string]any) {
			m["files"] = map[string]string{"a\xff.py": "x"}
		})), code: wire.CodeInvalidRequest, result: true},
		{name: "path traversal ..", msgID: "p-dotdot", body: jsonReq(with("p-dotdot", func(m map[string]any) {
			m["files"] = map[string]string{"../../../etc/cron.d/evil": "* * * * * root sh\n"}
		})), code: wire.CodeInvalidRequest, result: true},
		{name: "absolute path", msgID: "p-abs", body: jsonReq(with("p-abs", func(m map[string]any) { m["files"] = map[string]string{"/etc/passwd": "x"} })),
			code: wire.CodeInvalidRequest, result: true},
		{name: "traversal in node.file_path", msgID: "p-node-path", body: jsonReq(with("p-node-path", func(m map[string]any) {
			m["node"].(map[string]any)["file_path"] = "src/../../secret"
		})), code: wire.CodeInvalidRequest, result: true},
		{name: "backslash path", msgID: "p-backslash", body: jsonReq(with("p-backslash", func(m map[string]any) { m["files"] = map[string]string{`..\..\x`: "x"} })),
			code: wire.CodeInvalidRequest, result: true},
		{name: "NUL in path", msgID: "p-nul", body: jsonReq(with("p-nul", func(m map[string]any) { m["files"] = map[string]string{"a\x00.py": "x"} })),
			code: wire.CodeInvalidRequest, result: true},
		{name: "bad msgpack", msgID: "p-badmp", ctype: wire.ContentTypeMsgpack, body: []byte{0xc1, 0xff, 0x00, 0x93},
			code: wire.CodeUndecodable, result: true},
		{name: "msgpack trailing data", msgID: "p-mp-trail", ctype: wire.ContentTypeMsgpack,
			body: append(msgpackReq(id("p-mp-trail")), 0x01), code: wire.CodeUndecodable, result: true},
		{name: "json trailing data", msgID: "p-json-trail", body: append(jsonReq(id("p-json-trail")), []byte(`{"job_id":"x"}`)...),
			code: wire.CodeUndecodable, result: true},
		{name: "not json", msgID: "p-notjson", body: []byte("rm -rf / --no-preserve-root"), code: wire.CodeUndecodable, result: true},
		{name: "empty body", msgID: "p-empty", body: nil, code: wire.CodeUndecodable, result: true},
		{name: "whitespace body", msgID: "p-space", body: []byte(" \n\t "), code: wire.CodeUndecodable, result: true},
		{name: "wrong content type", msgID: "p-ctype", ctype: "text/plain", body: jsonReq(id("p-ctype")), code: wire.CodeUndecodable, result: true},
		{name: "msgpack body labelled json", msgID: "p-mislabel", body: msgpackReq(id("p-mislabel")), code: wire.CodeUndecodable, result: true},
		{name: "msg id differs from job id", msgID: "p-mismatch", body: jsonReq(id("p-other")), code: wire.CodeInvalidRequest, result: true},
		{name: "job id not a subject token", msgID: "", body: jsonReq(id("a.b c*>")), code: wire.CodeInvalidRequest},
		{name: "no id at all", msgID: "", body: []byte(`{}`), code: wire.CodeInvalidRequest},
		{name: "deeply nested json", msgID: "p-nested", body: []byte(`{"job_id":"p-nested","node":` + strings.Repeat(`{"x":`, 10000) + `1` + strings.Repeat(`}`, 10000) + `}`),
			code: wire.CodeUndecodable, result: true},
	}
}

// TestPoisonRequests sends a battery of hostile run requests to a worker
// process. Each must be terminated with a reason: a dead-letter copy with its
// QUEUE_00x code and, when its id is usable, a dead result carrying the same
// code. The worker process must survive them all and then serve a good job.
func TestPoisonRequests(t *testing.T) {
	t.Parallel()
	start := time.Now()
	srv := startServer(t, t.TempDir(), freePort(t))
	url := srv.ClientURL()
	nc := dial(t, url)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	streams := streamsEnv{AckWait: 2 * time.Second, MaxDeliver: 4}
	ensureStreams(t, js, streams.config())
	tr := newTracker(t, nc)
	w := startChild(t, childConfig{URL: url, Name: "target", Slots: 2, Job: 10 * time.Millisecond, Streams: streams})

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	battery := poisonBattery()
	bySeq := map[uint64]poison{}
	results := 0
	for _, p := range battery {
		m := &nats.Msg{Subject: cmpOr(p.subj, wire.RunSubject("lint")), Data: p.body, Header: nats.Header{}}
		if p.msgID != "" {
			m.Header.Set(wire.HeaderMsgID, p.msgID)
		}
		if p.ctype != "" {
			m.Header.Set(wire.HeaderContentType, p.ctype)
		}
		ack, err := js.PublishMsg(ctx, m)
		if err != nil {
			t.Fatalf("%s: publish: %v", p.name, err)
		}
		bySeq[ack.Sequence] = p
		if p.result {
			results++
		}
	}

	// Every poison gets a dead letter.
	dlq := readDLQ(t, js, len(battery))
	for seq, p := range bySeq {
		h, ok := dlq[seq]
		if !ok {
			t.Errorf("%s: no dead letter", p.name)
			continue
		}
		if got := h.Get(wire.HeaderDLQCode); got != string(p.code) {
			t.Errorf("%s: dead letter code %s (%s), want %s", p.name, got, h.Get(wire.HeaderDLQReason), p.code)
		}
		if h.Get(wire.HeaderDLQReason) == "" {
			t.Errorf("%s: dead letter without a reason", p.name)
		}
	}
	// And a dead result when its id is usable.
	if !tr.waitDistinct(results, 30*time.Second) {
		t.Errorf("only %d/%d poison requests got a result", tr.distinct(), results)
	}
	for _, p := range battery {
		if !p.result {
			continue
		}
		rid := p.msgID
		if p.name == "msg id differs from job id" {
			rid = "p-other" // the worker reports it under the body's job id
		}
		r := lastResult(t, js, rid)
		if r == nil {
			t.Errorf("%s: no result stored for %s", p.name, rid)
			continue
		}
		if r.State != wire.StateDead || r.ErrorCode != p.code || !strings.HasPrefix(r.Error, string(p.code)) {
			t.Errorf("%s: result state=%s code=%s error=%q, want dead %s", p.name, r.State, r.ErrorCode, r.Error, p.code)
		}
	}

	// The worker is still up and serves a good job.
	if !w.alive() {
		t.Fatalf("worker crashed:\n%s", w.logTail())
	}
	if _, err := enqueue(ctx, js, "good", 0, 1, nil); err != nil {
		t.Fatal(err)
	}
	if r := waitResult(t, js, jobID("good", 0), 30*time.Second); r == nil || r.State != wire.StateSucceeded {
		t.Fatalf("good job after the battery: %+v", r)
	}
	expectRunsEmpty(t, js)
	crashes := 0
	if !w.alive() {
		crashes = 1
	}
	if err := w.stop(30 * time.Second); err != nil {
		t.Errorf("stop: %v\n%s", err, w.logTail())
	}
	report(t, Summary{Test: "poison-requests", Jobs: len(battery) + 1, Elapsed: time.Since(start),
		Extra: fmt.Sprintf("poison=%d dead_lettered=%d dead_results=%d worker_crashes=%d good_job=ok", len(battery), len(dlq), results, crashes)})
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// readDLQ reads n dead letters and returns their headers by original
// FLEET_RUNS sequence.
func readDLQ(t *testing.T, js jetstream.JetStream, n int) map[uint64]nats.Header {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := js.OrderedConsumer(ctx, wire.StreamDLQ, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		t.Fatal(err)
	}
	out := map[uint64]nats.Header{}
	for len(out) < n {
		m, err := c.Next(jetstream.FetchMaxWait(30 * time.Second))
		if err != nil {
			t.Errorf("dead letters: %d/%d, then %v", len(out), n, err)
			return out
		}
		seq, _ := strconv.ParseUint(m.Headers().Get(wire.HeaderOrigSeq), 10, 64)
		out[seq] = m.Headers()
	}
	return out
}

// lastResult returns the stored result of a job, or nil.
func lastResult(t *testing.T, js jetstream.JetStream, id string) *wire.AgentResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, wire.StreamResults)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(ctx, wire.ResultSubject(id))
	if err != nil {
		return nil
	}
	r, err := wire.DecodeAgentResult(m.Data, m.Header.Get(wire.HeaderContentType))
	if err != nil {
		t.Errorf("result of %s: %v", id, err)
		return nil
	}
	return r
}

// waitResult polls for a job's stored result.
func waitResult(t *testing.T, js jetstream.JetStream, id string, d time.Duration) *wire.AgentResult {
	t.Helper()
	var r *wire.AgentResult
	_ = testutil.Poll(d, func() error {
		if r = lastResult(t, js, id); r == nil {
			return errors.New("no result yet")
		}
		return nil
	})
	return r
}
