package examples

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/internal/testutil"
	"github.com/agentfleet/fleet/internal/testutil/natstest"
	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/wire"
)

// protocolRequest is a valid request as a client in another language
// builds it: a generic map.
func protocolRequest(jobID string) map[string]any {
	return map[string]any{"version": 1, "job_id": jobID, "operation": "lint",
		"node":  map[string]any{"id": "a.py::f", "name": "f", "type": "function", "file_path": "a.py", "text": "def f(): pass\n"},
		"files": map[string]any{"a.py": "def f(): pass\n"}}
}

// TestRefusalsAsDocumented publishes, as an outside client would, the
// requests docs/PROTOCOL.md §5 says how a worker refuses, and checks what
// the document promises: the code (§9), the field named, a dead result and
// a dead status under the job id the worker could read, the dead letter,
// no Reply-To copy for a refused request, and the dead letter of a request
// without a job id found by its PubAck sequence. A msgpack request whose
// created_at is an RFC 3339 string runs.
func TestRefusalsAsDocumented(t *testing.T) {
	proc := &scriptedProcessor{}
	url := inProcessWorker(t, proc)
	nc, js := natstest.Dial(t, url)
	cl, err := client.NewClient(nc, client.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	replies, err := nc.SubscribeSync("clients.refusals.>")
	if err != nil {
		t.Fatal(err)
	}
	jsonBody := func(id string, raw string) []byte {
		// raw replaces the node's text with a literal JSON value (bytes as
		// they are: invalid UTF-8 included).
		return []byte(`{"version":1,"job_id":"` + id + `","operation":"lint","node":{"id":"a.py::f","name":"f","type":"function","file_path":"a.py","text":` +
			raw + `},"files":{"a.py":"def f(): pass\n"},"options":{"max_turns":4}}`)
	}
	mp := func(m map[string]any) []byte {
		b, err := msgpack.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	badTurns := protocolRequest("r-mp-type")
	badTurns["options"] = map[string]any{"max_turns": "6"}
	badUTF8 := protocolRequest("r-mp-utf8")
	badUTF8["files"] = map[string]any{"a.py": "x = '\xff'\n"}
	cases := []struct {
		name, msgID, ctype string
		body               []byte
		resultID           string // "" = no result: the dead letter is found by sequence
		code               fleettype.ErrorCode
		field              string
	}{
		{"json not UTF-8", "r-json-utf8", "", jsonBody("r-json-utf8", "\"x\xff\""), "r-json-utf8", wire.CodeInvalidRequest, "node.text"},
		{"json wrong type", "r-json-type", "", []byte(`{"job_id":"r-json-type","operation":"lint","options":{"max_turns":"6"}}`),
			"r-json-type", wire.CodeUndecodable, "options.max_turns"},
		{"msgpack wrong type", "r-mp-type", wire.ContentTypeMsgpack, mp(badTurns), "r-mp-type", wire.CodeUndecodable, "options.max_turns"},
		{"msgpack not UTF-8", "r-mp-utf8", wire.ContentTypeMsgpack, mp(badUTF8), "r-mp-utf8", wire.CodeInvalidRequest, `files["a.py"]`},
		{"undecodable, id from Nats-Msg-Id", "r-header-id", "", []byte("{not json"), "r-header-id", wire.CodeUndecodable, ""},
		{"undecodable, no id", "", "", []byte("{not json either"), "", wire.CodeUndecodable, ""},
	}
	seqs := map[string]uint64{}
	for _, c := range cases {
		m := &nats.Msg{Subject: wire.RunSubject("lint"), Data: c.body, Header: nats.Header{}}
		if c.msgID != "" {
			m.Header.Set(wire.HeaderMsgID, c.msgID)
		}
		if c.ctype != "" {
			m.Header.Set(wire.HeaderContentType, c.ctype)
		}
		m.Header.Set(wire.HeaderReplyTo, "clients.refusals."+strconv.Itoa(len(seqs)))
		ack, err := js.PublishMsg(ctx, m)
		if err != nil {
			t.Fatalf("%s: publish: %v", c.name, err)
		}
		seqs[c.name] = ack.Sequence
	}
	good := protocolRequest("r-mp-created-at")
	good["created_at"] = "2026-11-21T23:00:00.5Z"
	if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: wire.RunSubject("lint"), Data: mp(good),
		Header: nats.Header{wire.HeaderMsgID: {"r-mp-created-at"}, wire.HeaderContentType: {wire.ContentTypeMsgpack}}}); err != nil {
		t.Fatal(err)
	}

	for _, c := range cases {
		if c.resultID == "" {
			continue
		}
		r, err := cl.Wait(ctx, c.resultID)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		prefix := string(c.code) + ": "
		if r.State != wire.StateDead || r.Status != fleettype.StatusFailed || r.ErrorCode != c.code || !strings.HasPrefix(r.Error, prefix) {
			t.Errorf("%s: result state %s status %s code %s error %q; want dead, failed, %s", c.name, r.State, r.Status, r.ErrorCode, r.Error, c.code)
		}
		if c.field != "" && !strings.Contains(r.Error, ": "+c.field+": ") {
			t.Errorf("%s: error %q does not name %s", c.name, r.Error, c.field)
		}
		st, err := cl.Status(ctx, c.resultID)
		if err != nil || st.State != wire.StateDead || st.Code != c.code {
			t.Errorf("%s: status %+v, %v; want dead %s", c.name, st, err, c.code)
		}
	}
	r, err := cl.Wait(ctx, "r-mp-created-at")
	if err != nil || r.State != wire.StateSucceeded {
		t.Fatalf("msgpack request with an RFC 3339 created_at: %+v, %v", r, err)
	}
	proc.mu.Lock()
	ran := len(proc.reqs)
	var created time.Time
	if ran > 0 {
		created = proc.reqs[ran-1].CreatedAt
	}
	proc.mu.Unlock()
	if ran != 1 || !created.Equal(time.Date(2026, 11, 21, 23, 0, 0, 5e8, time.UTC)) {
		t.Errorf("the processor ran %d requests, the last created at %v", ran, created)
	}

	// Every refused request has its dead letter, with the code; the one
	// without a job id is found by its PubAck sequence.
	testutil.Eventually(t, 30*time.Second, "dead letters", func() error {
		dls, err := cl.DeadLetters(ctx)
		if err != nil {
			return err
		}
		bySeq := map[string]*client.DeadLetter{}
		for _, d := range dls {
			bySeq[d.Header.Get(wire.HeaderOrigSeq)] = d
		}
		for _, c := range cases {
			seq := strconv.FormatUint(seqs[c.name], 10)
			d := bySeq[seq]
			if d == nil {
				return fmt.Errorf("%s: no dead letter with %s %s", c.name, wire.HeaderOrigSeq, seq)
			}
			wantID := c.resultID + "-dlq"
			if c.resultID == "" {
				wantID = "seq-" + seq + "-dlq"
			}
			if d.Code != c.code || d.Header.Get(wire.HeaderMsgID) != wantID || d.Subject != wire.DLQSubject("lint") {
				t.Fatalf("%s: dead letter %s code %s msg id %q; want %s, %q", c.name, d.Subject, d.Code, d.Header.Get(wire.HeaderMsgID), c.code, wantID)
			}
		}
		return nil
	})
	// No Reply-To copy for a refused request: once the requests are gone
	// from FLEET_RUNS (they are terminated after their result), any copy
	// would have been routed to this connection already.
	testutil.Eventually(t, 30*time.Second, "requests removed", func() error {
		s, err := js.Stream(ctx, wire.StreamRuns)
		if err != nil {
			return err
		}
		info, err := s.Info(ctx)
		if err != nil {
			return err
		}
		if info.State.Msgs != 0 {
			return fmt.Errorf("%d requests left", info.State.Msgs)
		}
		return nil
	})
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if n, _, err := replies.Pending(); err != nil || n != 0 {
		m, _ := replies.NextMsg(0)
		t.Errorf("refused requests got %d Reply-To copies (first %v), %v", n, m, err)
	}
}
