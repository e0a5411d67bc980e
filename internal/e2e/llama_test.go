package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/loop"
)

// The worker binary built with the llama.cpp backend, on the tiny generated model.

// llamaWorker returns the tiny generated model and the worker binary built
// with the llama.cpp backend, or skips the test when either cannot be had.
func llamaWorker(t *testing.T) (model, bin string) {
	t.Helper()
	model = filepath.Join(repoRoot, "models", "tiny.gguf")
	if _, err := os.Stat(model); err != nil {
		t.Skipf("the tiny model %s is missing (make model-tiny generates it; make test does)", model)
	}
	if os.Getenv("CGO_CPPFLAGS") == "" {
		t.Skip("the llama.cpp build needs the cgo flags of mk/inference.mk: run it through make test")
	}
	bin = filepath.Join(binDir, "worker-llama")
	if err := goBuild(bin, "./cmd/worker", "-tags", "llama"); err != nil {
		t.Fatal(err)
	}
	return model, bin
}

// The llama.cpp backend on the tiny generated model, through the real
// worker binary: the job finishes (the random weights decide how) and the
// events show real model turns with token counts.
func TestLlamaWorker(t *testing.T) {
	model, bin := llamaWorker(t)
	w := startWorker(t, bin, fmt.Sprintf("model:\n  backend: llama\n  path: %s\n  context_size: 4096\n  max_tokens: 64\n", model))
	if !strings.Contains(w.Logs(), `"backend":"llama"`) {
		t.Fatalf("backend not logged:\n%s", w.Logs())
	}
	out, stderr, code := enqueue(t, w.url, "run", "lint", sample, "--max-turns", "2", "--json")
	if code != 0 && code != 1 {
		t.Fatalf("exit %d\n%s\n%s\n%s", code, out, stderr, w.Logs())
	}
	evs, r := parseNDJSON(t, out)
	if len(evs) == 0 || !r.State.Terminal() || r.Turns == 0 || r.Usage.PromptTokens == 0 {
		t.Fatalf("result %+v", r)
	}
	outputs := 0
	for _, e := range evs {
		if e.Kind == fleettype.EventModelOutput && e.Usage != nil && e.Usage.PromptTokens > 0 {
			outputs++
		}
	}
	if outputs == 0 {
		t.Fatalf("no model_output event with token usage: %+v", evs)
	}
	if r.ErrorCode == fleettype.ErrorCode(loop.ErrCodeModel) {
		t.Fatalf("the model backend failed: %s\n%s", r.Error, w.Logs())
	}
	if err := w.stop(); err != nil {
		t.Fatalf("worker exit: %v", err)
	}
}
