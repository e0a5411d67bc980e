package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/vmihailenco/msgpack/v5"
)

// requestMap is a valid request as a generic map, for cases that need
// values of types RunRequest cannot hold.
func requestMap() map[string]any {
	return map[string]any{"version": 1, "job_id": "j1", "operation": "lint",
		"node":    map[string]any{"id": "a.py::f", "name": "f", "type": "function", "file_path": "a.py", "text": "def f(): pass\n"},
		"files":   map[string]any{"a.py": "def f(): pass\n"},
		"options": map[string]any{"max_turns": 4}}
}

// TestDecodeCodesAsDocumented holds DecodeRunRequest to docs/PROTOCOL.md §9:
// in both encodings, a string that is not UTF-8 is QUEUE_003 and a field of
// the wrong type (or an unreadable created_at) is QUEUE_001, each naming the
// field; the worker dead-letters a request with the code the decoder gives.
func TestDecodeCodesAsDocumented(t *testing.T) {
	t.Parallel()
	type mutation func(m map[string]any)
	node := func(k string, v any) mutation { return func(m map[string]any) { m["node"].(map[string]any)[k] = v } }
	set := func(k string, v any) mutation { return func(m map[string]any) { m[k] = v } }
	opt := func(k string, v any) mutation { return func(m map[string]any) { m["options"].(map[string]any)[k] = v } }
	cases := []struct {
		name  string
		mut   mutation
		code  fleettype.ErrorCode // "" = accepted
		field string
	}{
		{"valid", func(map[string]any) {}, "", ""},
		{"created_at RFC 3339", set("created_at", "2026-11-21T23:00:00Z"), "", ""},
		{"created_at RFC 3339 nano", set("created_at", "2026-11-21T23:00:00.123456789+01:00"), "", ""},
		{"created_at null", set("created_at", nil), "", ""},
		{"created_at not a time", set("created_at", "yesterday"), CodeUndecodable, "created_at"},
		{"created_at number", set("created_at", 1234), CodeUndecodable, "created_at"},
		{"node.text not UTF-8", node("text", "x\xff"), CodeInvalidRequest, "node.text"},
		{"node.name not UTF-8", node("name", "\xc3"), CodeInvalidRequest, "node.name"},
		{"file content not UTF-8", set("files", map[string]any{"a.py": "\xfe\xff"}), CodeInvalidRequest, `files["a.py"]`},
		{"job_id not UTF-8", set("job_id", "j\xff"), CodeInvalidRequest, "job_id"},
		{"job_id a number", set("job_id", 7), CodeUndecodable, "job_id"},
		{"version a string", set("version", "1"), CodeUndecodable, "version"},
		{"node a string", set("node", "f"), CodeUndecodable, "node"},
		{"node.type a number", node("type", 3), CodeUndecodable, "node.type"},
		{"files an array", set("files", []any{"a.py"}), CodeUndecodable, "files"},
		{"file content a number", set("files", map[string]any{"a.py": 1}), CodeUndecodable, `files["a.py"]`},
		{"max_turns a string", opt("max_turns", "6"), CodeUndecodable, "options.max_turns"},
		{"max_turns a float", opt("max_turns", 6.5), CodeUndecodable, "options.max_turns"},
		{"options a list", set("options", []any{1}), CodeUndecodable, "options"},
		{"max_turns out of range", opt("max_turns", 5000), CodeInvalidRequest, "options.max_turns"},
		{"teacher", opt("teacher", true), "", ""},
		{"teacher a string", opt("teacher", "yes"), CodeUndecodable, "options.teacher"},
		{"teacher a number", opt("teacher", 1), CodeUndecodable, "options.teacher"},
	}
	for _, enc := range []Encoding{JSON, Msgpack} {
		for _, c := range cases {
			t.Run(enc.String()+"/"+c.name, func(t *testing.T) {
				m := requestMap()
				c.mut(m)
				var data []byte
				if enc == JSON {
					// encoding/json would escape the bad bytes: write them raw.
					data = rawJSON(t, m)
				} else {
					var err error
					if data, err = msgpack.Marshal(m); err != nil {
						t.Fatal(err)
					}
				}
				req, err := DecodeRunRequest(data, enc.ContentType())
				if c.code == "" {
					if err != nil {
						t.Fatalf("refused: %v", err)
					}
					if _, ok := m["options"].(map[string]any)["teacher"]; ok != req.Options.Teacher {
						t.Fatalf("options.teacher decoded as %v", req.Options.Teacher)
					}
					if v, ok := m["created_at"].(string); ok {
						want, _ := time.Parse(time.RFC3339Nano, v)
						if !req.CreatedAt.Equal(want) {
							t.Fatalf("created_at = %v, want %v", req.CreatedAt, want)
						}
					}
					return
				}
				var re *RequestError
				if !errors.As(err, &re) {
					t.Fatalf("err = %v, want a *RequestError", err)
				}
				if re.Code != c.code || re.Field != c.field {
					t.Fatalf("got %s on %q (%v), want %s on %q", re.Code, re.Field, err, c.code, c.field)
				}
			})
		}
	}
}

// rawJSON encodes m as JSON with its strings' bytes copied as they are
// (invalid UTF-8 included).
func rawJSON(t *testing.T, v any) []byte {
	t.Helper()
	switch v := v.(type) {
	case map[string]any:
		out := []byte{'{'}
		first := true
		for k, x := range v {
			if !first {
				out = append(out, ',')
			}
			first = false
			out = append(out, rawJSON(t, k)...)
			out = append(out, ':')
			out = append(out, rawJSON(t, x)...)
		}
		return append(out, '}')
	case []any:
		out := []byte{'['}
		for i, x := range v {
			if i > 0 {
				out = append(out, ',')
			}
			out = append(out, rawJSON(t, x)...)
		}
		return append(out, ']')
	case string:
		out := []byte{'"'}
		for i := 0; i < len(v); i++ {
			switch c := v[i]; {
			case c == '"' || c == '\\':
				out = append(out, '\\', c)
			case c < 0x20:
				out = fmt.Appendf(out, `\u%04x`, c)
			default:
				out = append(out, c)
			}
		}
		return append(out, '"')
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestMsgpackCreatedAtForms: a msgpack request's created_at may be a
// timestamp (what msgpack libraries write for a time), an RFC 3339 string
// (what a client that formats times as text writes) or absent, and all
// three decode to the same instant.
func TestMsgpackCreatedAtForms(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 21, 23, 0, 0, 5000, time.UTC)
	for name, v := range map[string]any{"timestamp": at, "string": at.Format(time.RFC3339Nano)} {
		m := requestMap()
		m["created_at"] = v
		b, err := msgpack.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		req, err := DecodeRunRequest(b, ContentTypeMsgpack)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !req.CreatedAt.Equal(at) {
			t.Errorf("%s: created_at = %v, want %v", name, req.CreatedAt, at)
		}
	}
	b, _ := msgpack.Marshal(requestMap())
	if req, err := DecodeRunRequest(b, ContentTypeMsgpack); err != nil || !req.CreatedAt.IsZero() {
		t.Errorf("absent: %v, %v", req, err)
	}
	// What this package encodes (a timestamp) still round-trips.
	r := sampleRequest()
	b, _ = Msgpack.Marshal(r)
	if got, err := DecodeRunRequest(b, ContentTypeMsgpack); err != nil || !got.CreatedAt.Equal(r.CreatedAt) {
		t.Errorf("round trip: %v, %v", got, err)
	}
}

func TestJSONInvalidUTF8Field(t *testing.T) {
	t.Parallel()
	for doc, want := range map[string]string{
		"{\"node\":{\"id\":\"a\",\"text\":\"x\xff\"}}":        "node.text",
		"{\"files\":{\"a.py\":\"ok\",\"b/c.py\":\"\xfe\"}}":   `files["b/c.py"]`,
		"{\"files\":{\"a\xff.py\":\"ok\"}}":                   "files[\"a\uFFFD.py\"]", // keys come back with U+FFFD
		"{\"extra\":[1,{\"k\":[\"ok\",\"\xc3\"]}]}":           "extra[1].k[1]",
		"{\"job_id\":\"j\xff\",\"node\":{\"text\":\"\xff\"}}": "job_id",
		"\"\xff\"": "",
	} {
		got, ok := jsonInvalidUTF8([]byte(doc))
		if !ok || got != want {
			t.Errorf("%q: got %q, %v; want %q", doc, got, ok, want)
		}
	}
	for _, doc := range []string{"{\"a\":1\xff}", "{\xff}", "[1,2,\xff]"} {
		if got, ok := jsonInvalidUTF8([]byte(doc)); ok {
			t.Errorf("%q: got %q, want no field (the bad byte is outside every string)", doc, got)
		}
	}
}

// FuzzJSONInvalidUTF8 feeds arbitrary documents to the field finder: it
// must not panic, and a field it names must hold invalid UTF-8.
func FuzzJSONInvalidUTF8(f *testing.F) {
	f.Add([]byte("{\"node\":{\"text\":\"x\xff\"}}"))
	f.Add([]byte("[[[{\"a\":[\"\xff\"]}]]]"))
	f.Add([]byte("}]\xff"))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = jsonInvalidUTF8(data)
	})
}

// BenchmarkDecodeRunRequest measures the decoder on the request of
// PROTOCOL.md's example size, in both encodings, beside a baseline in the
// same run: the plain library decode into RunRequest plus Validate, which is
// what DecodeRunRequest did before it named fields and read created_at
// itself.
func BenchmarkDecodeRunRequest(b *testing.B) {
	for _, enc := range []Encoding{JSON, Msgpack} {
		data, err := enc.Marshal(sampleRequest())
		if err != nil {
			b.Fatal(err)
		}
		b.Run("baseline/"+enc.String(), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				req := new(RunRequest)
				if err := enc.Unmarshal(data, req); err != nil {
					b.Fatal(err)
				}
				if err := req.Validate(); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("decode/"+enc.String(), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := DecodeRunRequest(data, enc.ContentType()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
