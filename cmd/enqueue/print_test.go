package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/queue/wire"
)

// capLine cuts on characters: Devanagari text (three bytes a character)
// stays valid UTF-8 at every length.
func TestCapLineCutsCharacters(t *testing.T) {
	s := strings.Repeat("नमस्ते ", 30)
	for n := 0; n < 60; n++ {
		got := capLine(s, n)
		if !utf8.ValidString(got) {
			t.Fatalf("capLine(%d) = %q: not UTF-8", n, got)
		}
		if c := utf8.RuneCountInString(strings.TrimSuffix(got, "…")); c != n {
			t.Fatalf("capLine(%d) kept %d characters", n, c)
		}
	}
	if got := capLine("short", 10); got != "short" {
		t.Fatalf("capLine cut a short line: %q", got)
	}
}

func TestPrintUsage(t *testing.T) {
	var b bytes.Buffer
	printUsage(&b, &wire.AgentResult{
		Result: fleettype.Result{Usage: fleettype.Usage{PromptTokens: 3000, CachedTokens: 2000, CompletionTokens: 100, ForcedTokens: 40,
			PromptDuration: time.Second, CompletionDuration: 2 * time.Second}}, Timings: wire.ResultTimings{Queued: time.Millisecond, Run: 5 * time.Second, Model: 3 * time.Second, Tools: time.Second},
	})
	for _, want := range []string{"2000 reused from the KV cache, 1000 prefilled (1s, 1000 tok/s)",
		"100 tokens generated: 60 sampled, 40 forced by the grammar (2s, 50 tok/s)", "ran 5s = model 3s + tools 1s + other 1s"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("missing %q in\n%s", want, b.String())
		}
	}
}

// A parked run's event tells the user the question and how to answer it.
func TestPrintParkedEvent(t *testing.T) {
	var b strings.Builder
	p := newPrinter(&b, false)
	p.event(&wire.Event{JobID: "lint-7", Attempt: 1, Event: fleettype.Event{Kind: fleettype.EventParked,
		Seq: 4, Turn: 1, Tool: "apply_fix", Text: "May I rename the public function?"}})
	got := b.String()
	for _, want := range []string{"apply_fix asks: May I rename the public function?", "enqueue answer lint-7 TEXT"} {
		if !strings.Contains(got, want) {
			t.Fatalf("printed %q, want it to contain %q", got, want)
		}
	}
}

// A model's long error (random weights write thousands of characters)
// is cut to one readable line, on characters, in the result and in the
// finished event.
func TestPrintLongError(t *testing.T) {
	var b strings.Builder
	p := newPrinter(&b, false)
	long := strings.Repeat("नमस्ते ", 2000)
	p.event(&wire.Event{JobID: "lint-8", Attempt: 1, Event: fleettype.Event{Kind: fleettype.EventFinished,
		Status: "failed", Error: long}})
	p.result(&wire.AgentResult{JobID: "lint-8", State: wire.StateFailed, Result: fleettype.Result{Status: "failed", Error: long}})
	for _, line := range strings.Split(b.String(), "\n") {
		if strings.Contains(line, "नमस्ते") && (utf8.RuneCountInString(line) > 420 || !utf8.ValidString(line) || !strings.HasSuffix(line, "…")) {
			t.Fatalf("line of %d characters (valid %v): %.80q…", utf8.RuneCountInString(line), utf8.ValidString(line), line)
		}
	}
	if !strings.Contains(b.String(), "error:") || !strings.Contains(b.String(), "finished:") {
		t.Fatalf("printed %q", b.String())
	}
}
