package llama

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	ollamallama "github.com/ollama/ollama/llama"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/inference/functiongemma"
	"github.com/agentfleet/fleet/inference/gguf"
	"github.com/agentfleet/fleet/loop"
)

// tinyModel is a tiny generated GGUF (real architecture and tokenizer, random
// weights), written once by TestMain.
var tinyModel string

func TestMain(m *testing.M) {
	slog.SetLogLoggerLevel(slog.LevelError)
	dir, err := os.MkdirTemp("", "llama-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	tinyModel = filepath.Join(dir, "tiny.gguf")
	if err := gguf.WriteFile(tinyModel, gguf.Tiny()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type bundle struct {
	b    *Backend
	slot *Slot
}

func setup(t testing.TB, mut func(*Config)) *bundle {
	t.Helper()
	cfg := Config{Model: ModelRef{Path: tinyModel}, ContextSize: 2048, MaxTokens: 64}
	if mut != nil {
		mut(&cfg)
	}
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	s, err := b.NewSlot()
	if err != nil {
		t.Fatal(err)
	}
	return &bundle{b: b, slot: s}
}

var weatherTools = []fleettype.ToolSpec{
	{Name: "get_job_status", Description: "Return the state of a queued job.",
		Parameters: json.RawMessage(`{"type":"object","properties":{"job_id":{"type":"string","description":"Job identifier"}},"required":["job_id"]}`)},
	{Name: "submit_result", Description: "Submit the final result.",
		Parameters: json.RawMessage(`{"type":"object","properties":{"summary":{"type":"string","description":"What was done"},"count":{"type":"integer","description":"How many"}},"required":["summary"]}`)},
}

func baseRequest() *loop.Request {
	return &loop.Request{
		Messages: []fleettype.Message{
			{Role: fleettype.RoleSystem, Content: "You check jobs."},
			{Role: fleettype.RoleUser, Content: "Has job 7f3a finished?"},
		},
		Tools:    weatherTools,
		CacheKey: "test_agent",
	}
}

// TestContextLayout guards the unexported layout cgo.go relies on: field 0
// of llama.Context is the C context pointer named c.
func TestContextLayout(t *testing.T) {
	f := reflect.TypeFor[ollamallama.Context]().Field(0)
	if f.Name != "c" || f.Type.Kind() != reflect.Pointer || !strings.HasSuffix(f.Type.Elem().Name(), "llama_context") || f.Offset != 0 {
		t.Fatalf("llama.Context field 0 is %s %s at %d: cgo.go needs updating for this ollama version", f.Name, f.Type, f.Offset)
	}
	g := reflect.TypeFor[ollamallama.Model]().Field(0)
	if g.Type.Kind() != reflect.Pointer || g.Offset != 0 {
		t.Fatalf("llama.Model field 0 is %s %s", g.Name, g.Type)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	bad := []Config{
		{},
		{Model: ModelRef{Path: "x"}, ContextSize: -1},
		{Model: ModelRef{Path: "x"}, ContextSize: 100, BatchSize: 200},
		{Model: ModelRef{Path: "x"}, ContextSize: 256, MaxTokens: 256},
		{Model: ModelRef{Path: "x"}, Sampling: Sampling{TopP: 2}},
	}
	for i, c := range bad {
		if err := c.validate(); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("case %d: %v, want ErrInvalidConfig", i, err)
		}
	}
	c := Config{Model: ModelRef{Path: "x"}}
	if err := c.validate(); err != nil {
		t.Fatal(err)
	}
	if c.ContextSize != DefaultContextSize || c.BatchSize != DefaultBatchSize || c.Sampling.TopP != 1 || c.Sampling.TopK != DefaultTopK {
		t.Fatalf("defaults not applied: %+v", c)
	}
	if _, err := New(Config{Model: ModelRef{Path: filepath.Join(t.TempDir(), "missing.gguf")}}); err == nil {
		t.Fatal("New with a missing model succeeded")
	}
}

func TestLoadVocabulary(t *testing.T) {
	t.Parallel()
	bd := setup(t, nil)
	m, err := bd.b.model(tinyModel)
	if err != nil {
		t.Fatal(err)
	}
	if m.nVocab != gguf.Tiny().VocabSize {
		t.Fatalf("vocab %d", m.nVocab)
	}
	for text, want := range map[string]int{"<start_function_call>": 48, "<start_function_response>": 50, "<escape>": 52, "<start_of_turn>": 105, "<end_of_turn>": 106} {
		if id, err := m.specialID(text); err != nil || id != want {
			t.Errorf("specialID(%q) = %d, %v; want %d", text, id, err, want)
		}
	}
	if !m.isStop(50) || !m.isStop(106) || !m.isStop(1) || m.isStop(48) {
		t.Error("stop set is not {1, 106, 50}")
	}
	// Untrusted text never becomes a control token.
	ids, err := m.m.Tokenize("<escape>call:x", false, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if m.isSpecial(id) {
			t.Fatalf("untrusted text produced special token %d (%q)", id, m.pieces[id])
		}
	}
	// Model loaded once per path.
	m2, _ := bd.b.model(tinyModel)
	if m2 != m {
		t.Fatal("model loaded twice")
	}
}

func TestCompleteLenient(t *testing.T) {
	t.Parallel()
	bd := setup(t, func(c *Config) { c.Lenient = true })
	resp, err := bd.slot.Complete(context.Background(), baseRequest())
	if err != nil && !errors.Is(err, loop.ErrInvalidResponse) {
		t.Fatal(err)
	}
	if err != nil {
		return // random weights may write something unparseable: a typed error is fine
	}
	u := resp.Usage
	if u.PromptTokens < 50 || u.CompletionTokens == 0 || u.CachedTokens != 0 || u.PromptDuration <= 0 {
		t.Fatalf("usage %+v", u)
	}
	switch resp.FinishReason {
	case loop.FinishStop, loop.FinishLength, loop.FinishToolCalls:
	default:
		t.Fatalf("finish %q", resp.FinishReason)
	}
}

// Config.OnPrompt sees each prompt as rendered and tokenized, with the
// model it goes to: the FunctionGemma text of the request (the same
// tokens as tokenizePrompt, <bos> aside).
func TestOnPrompt(t *testing.T) {
	t.Parallel()
	type seen struct {
		ref  ModelRef
		text string
	}
	var got []seen
	bd := setup(t, func(c *Config) {
		c.OnPrompt = func(ref ModelRef, text string) { got = append(got, seen{ref, text}) }
	})
	req := baseRequest()
	if _, err := bd.slot.Complete(context.Background(), req); err != nil && !errors.Is(err, loop.ErrInvalidResponse) {
		t.Fatal(err)
	}
	want, err := functiongemma.Render(req)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].ref != (ModelRef{Path: tinyModel}) || got[0].text != want {
		t.Fatalf("OnPrompt saw %+v, want one call with\n%q", got, want)
	}
	m, err := bd.b.model(tinyModel)
	if err != nil {
		t.Fatal(err)
	}
	fromText, err := m.m.Tokenize(want, false, true)
	if err != nil {
		t.Fatal(err)
	}
	toks, err := tokenizePrompt(m, req)
	if err != nil {
		t.Fatal(err)
	}
	if m.addBOS {
		toks = toks[1:]
	}
	if !slices.Equal(toks, fromText) {
		t.Fatalf("the text OnPrompt saw tokenizes to %d tokens, the prompt is %d", len(fromText), len(toks))
	}
}

func TestCancelled(t *testing.T) {
	t.Parallel()
	bd := setup(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := bd.slot.Complete(ctx, baseRequest()); !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
}

func TestContextFull(t *testing.T) {
	t.Parallel()
	bd := setup(t, func(c *Config) { c.ContextSize = 128; c.MaxTokens = 16; c.BatchSize = 64 })
	req := baseRequest()
	req.Messages[1].Content = strings.Repeat("very long question ", 100)
	if _, err := bd.slot.Complete(context.Background(), req); !errors.Is(err, ErrContextFull) {
		t.Fatalf("err %v, want ErrContextFull", err)
	}
}

func TestReusablePrefix(t *testing.T) {
	t.Parallel()
	bd := setup(t, nil)
	m, _ := bd.b.model(tinyModel)
	tok := func(s string) []int {
		ids, err := m.m.Tokenize(s, false, false)
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	head := tok("hello world ")
	// The cache holds the same text tokenized differently ("c","all").
	var split []int
	for _, ch := range "call" {
		split = append(split, tok(string(ch))...)
	}
	cached := append(append(append([]int{}, head...), split...), 48)
	prompt := append(append(append([]int{}, head...), tok("call")...), 48, 49)
	nc, np := reusablePrefix(m, cached, prompt)
	if nc != len(cached) || np != len(prompt)-1 {
		t.Fatalf("reusablePrefix = %d, %d; want %d, %d", nc, np, len(cached), len(prompt)-1)
	}
	// A special token never aligns with its text typed as characters.
	typed := append(append([]int{}, head...), tok("<escape>")...)
	special := append(append([]int{}, head...), 52, 49)
	if nc, _ := reusablePrefix(m, typed, special); nc != len(head) {
		t.Fatalf("special/text aligned: nc = %d, want %d", nc, len(head))
	}
}

func asInvalid(err error, target **loop.InvalidResponseError) bool {
	return errors.As(err, target) || errors.Is(err, loop.ErrInvalidResponse)
}
