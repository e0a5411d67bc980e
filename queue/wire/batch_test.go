package wire

import (
	"errors"
	"strings"
	"testing"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/vmihailenco/msgpack/v5"
)

func TestBatchRequestFields(t *testing.T) {
	ok := `{"version":1,"job_id":"b1-1","operation":"lint","batch":"b1","labels":{"suite":"nightly","team.name":"core"},"node":{"id":"a.py::f"},"files":{"a.py":"x"}}`
	r, err := DecodeRunRequest([]byte(ok), "")
	if err != nil || r.Batch != "b1" || r.Labels["team.name"] != "core" {
		t.Fatalf("decoded %+v %v", r, err)
	}
	for name, c := range map[string]struct {
		body  string
		code  fleettype.ErrorCode
		field string
	}{
		"batch id":     {`{"job_id":"j","operation":"lint","batch":"a.b"}`, CodeInvalidRequest, "batch"},
		"long batch":   {`{"job_id":"j","operation":"lint","batch":"` + strings.Repeat("b", 65) + `"}`, CodeInvalidRequest, "batch"},
		"label key":    {`{"job_id":"j","operation":"lint","labels":{"a b":"x"}}`, CodeInvalidRequest, "labels"},
		"label ctrl":   {`{"job_id":"j","operation":"lint","labels":{"a":"x\ny"}}`, CodeInvalidRequest, `labels["a"]`},
		"label long":   {`{"job_id":"j","operation":"lint","labels":{"a":"` + strings.Repeat("v", 257) + `"}}`, CodeInvalidRequest, `labels["a"]`},
		"labels array": {`{"job_id":"j","operation":"lint","labels":["a"]}`, CodeUndecodable, "labels"},
		"batch number": {`{"job_id":"j","operation":"lint","batch":7}`, CodeUndecodable, "batch"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := DecodeRunRequest([]byte(c.body), "")
			var re *RequestError
			if !errors.As(err, &re) || re.Code != c.code || re.Field != c.field {
				t.Fatalf("error %v (%+v), want %s on %s", err, re, c.code, c.field)
			}
		})
	}
	many := map[string]string{}
	for i := range MaxLabels + 1 {
		many[string(rune('a'+i))] = "v"
	}
	if err := ValidateLabels(many); err == nil {
		t.Fatal("17 labels accepted")
	}
	// msgpack: a labels value of the wrong type names the label.
	data, err := msgpack.Marshal(map[string]any{"job_id": "j", "operation": "lint", "labels": map[string]any{"k": 3}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = DecodeRunRequest(data, ContentTypeMsgpack)
	var re *RequestError
	if !errors.As(err, &re) || re.Code != CodeUndecodable || re.Field != "labels.k" {
		t.Fatalf("msgpack labels: %v", err)
	}
}

func TestParseLabel(t *testing.T) {
	if k, v, err := ParseLabel("suite=a=b"); err != nil || k != "suite" || v != "a=b" {
		t.Fatalf("%q %q %v", k, v, err)
	}
	for _, bad := range []string{"novalue", "=x", "a b=c"} {
		if _, _, err := ParseLabel(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestBatchSubjects(t *testing.T) {
	if got := BatchDoneSubject("b", "lint", StateFailed, "AGENT_003"); got != "agents.batch.b.done.lint.failed.AGENT_003" {
		t.Fatal(got)
	}
	if got := BatchDoneSubject("b", "lint", StateSucceeded, ""); got != "agents.batch.b.done.lint.succeeded.none" {
		t.Fatal(got)
	}
	if _, ok := ParseBatchSubject("b", BatchIndexSubject("b")); ok {
		t.Fatal("the index parsed as a tally")
	}
	if _, ok := ParseBatchSubject("b", BatchStartedSubject("bb", "lint")); ok {
		t.Fatal("another batch's tally parsed")
	}
}

// FuzzBatchSubject: a tally subject built from any valid parts parses back
// to them, and parsing anything never panics.
func FuzzBatchSubject(f *testing.F) {
	f.Add("b-1", "lint", "failed", "AGENT_003", "agents.batch.b-1.done.lint.x.y")
	f.Add("b", "docstring", "succeeded", "", "agents.batch.b.started.lint")
	f.Fuzz(func(t *testing.T, batch, op, state, code, subject string) {
		_, _ = ParseBatchSubject(batch, subject)
		if !ValidBatchID(batch) || !ValidOperation(op) || !validToken(state, 32, false) {
			return
		}
		k, ok := ParseBatchSubject(batch, BatchDoneSubject(batch, op, JobState(state), fleettype.ErrorCode(code)))
		if !ok || k.Kind != "done" || k.Operation != op || string(k.State) != state {
			t.Fatalf("done %q %q %q %q -> %+v %v", batch, op, state, code, k, ok)
		}
		if validToken(code, 32, true) && code != BatchNoCode && string(k.Code) != code {
			t.Fatalf("code %q -> %q", code, k.Code)
		}
		k, ok = ParseBatchSubject(batch, BatchStartedSubject(batch, op))
		if !ok || k.Kind != "started" || k.Operation != op {
			t.Fatalf("started %q %q -> %+v", batch, op, k)
		}
	})
}
