package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/vmihailenco/msgpack/v5"
)

// The request's project: optional, a token; a bad one is QUEUE_003 and a
// wrong type QUEUE_001, naming the field, in both encodings.
func TestRequestProject(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		project any
		code    fleettype.ErrorCode
	}{
		{"demo", ""}, {"my_repo-2", ""}, {"", ""}, {nil, ""}, {strings.Repeat("p", 64), ""},
		{strings.Repeat("p", 65), CodeInvalidRequest}, {"a.b", CodeInvalidRequest}, {"a b", CodeInvalidRequest},
		{"*", CodeInvalidRequest}, {7, CodeUndecodable},
	} {
		for _, enc := range []Encoding{JSON, Msgpack} {
			m := requestMap()
			m["project"] = c.project
			var data []byte
			var err error
			if enc == JSON {
				data, err = json.Marshal(m)
			} else {
				data, err = msgpack.Marshal(m)
			}
			if err != nil {
				t.Fatal(err)
			}
			req, err := DecodeRunRequest(data, enc.ContentType())
			var re *RequestError
			switch {
			case c.code == "" && err != nil:
				t.Errorf("%s project %v refused: %v", enc, c.project, err)
			case c.code == "" && ProjectOf(req) != wantProject(c.project):
				t.Errorf("%s project %v: ProjectOf = %q", enc, c.project, ProjectOf(req))
			case c.code != "" && (!errors.As(err, &re) || re.Code != c.code || re.Field != "project"):
				t.Errorf("%s project %v: %v, want %s naming project", enc, c.project, err, c.code)
			}
		}
	}
}

func TestMemoryKeys(t *testing.T) {
	t.Parallel()
	k := MemoryKey("lint", "demo", "quote-style")
	if a, p, key, ok := SplitMemoryKey(k); !ok || a != "lint" || p != "demo" || key != "quote-style" {
		t.Fatalf("SplitMemoryKey(%q) = %q %q %q %v", k, a, p, key, ok)
	}
	for _, bad := range []string{"lint.demo", "lint.demo.a.b", "Lint.demo.k", "lint..k", "lint.demo.*", "lint.demo." + strings.Repeat("k", 65)} {
		if _, _, _, ok := SplitMemoryKey(bad); ok {
			t.Errorf("SplitMemoryKey(%q) accepted", bad)
		}
	}
	for _, good := range []string{"k", "quote-style", "A_b-9", strings.Repeat("k", 64)} {
		if !ValidMemoryKey(good) {
			t.Errorf("ValidMemoryKey(%q) = false", good)
		}
	}
	for _, bad := range []string{"", "a.b", "a b", "*", ">", "é", strings.Repeat("k", 65)} {
		if ValidMemoryKey(bad) {
			t.Errorf("ValidMemoryKey(%q) = true", bad)
		}
	}
}

// docs/PROTOCOL.md §15's entry example decodes into MemoryEntry with no
// unknown field and checks under its key; Check refuses entries that do
// not match their key or lack text, time or version.
func TestMemoryEntryDocExample(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/PROTOCOL.md")
	if err != nil {
		t.Fatal(err)
	}
	const fence = "```json memory-entry\n"
	i := bytes.Index(doc, []byte(fence))
	if i < 0 {
		t.Fatal("PROTOCOL.md has no memory-entry example")
	}
	block := doc[i+len(fence):]
	block = block[:bytes.Index(block, []byte("```"))]
	var e MemoryEntry
	dec := json.NewDecoder(bytes.NewReader(block))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		t.Fatal(err)
	}
	key := MemoryKey(e.Agent, e.Project, e.Key)
	if err := e.Check(key); err != nil {
		t.Fatalf("the example does not check: %v", err)
	}
	for name, mut := range map[string]func(*MemoryEntry){
		"version": func(e *MemoryEntry) { e.Version = 2 },
		"key":     func(e *MemoryEntry) { e.Key = "other" },
		"text":    func(e *MemoryEntry) { e.Text = "" },
		"no time": func(e *MemoryEntry) { e.UpdatedAt = time.Time{} },
		"agent":   func(e *MemoryEntry) { e.Agent = "docstring" },
		"project": func(e *MemoryEntry) { e.Project = "x" },
	} {
		c := e
		mut(&c)
		if c.Check(key) == nil {
			t.Errorf("%s: a bad entry checks", name)
		}
	}
}

// wantProject is ProjectOf's answer for a request whose project field is p.
func wantProject(p any) string {
	if s, _ := p.(string); s != "" {
		return s
	}
	return DefaultProject
}

// SplitMemoryKey accepts exactly the keys MemoryKey makes from valid
// tokens.
func FuzzSplitMemoryKey(f *testing.F) {
	for _, s := range []string{"lint.demo.k", "a.b", "a.b.c.d", "..", "lint.demo.*", "Lint.x.y", "a.b.é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, p, k, ok := SplitMemoryKey(s)
		if !ok {
			return
		}
		if MemoryKey(a, p, k) != s || !ValidOperation(a) || !ValidProject(p) || !ValidMemoryKey(k) {
			t.Fatalf("SplitMemoryKey(%q) = %q %q %q", s, a, p, k)
		}
	})
}
