//go:build llama

package train_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/agentfleet/fleet/inference/gguf"
	"github.com/agentfleet/fleet/train"
)

// TestResumeAfterSIGKILL kills the trainer with SIGKILL between two
// checkpoints, runs again, and requires exactly the weights of an
// uninterrupted run with the same seed.
func TestResumeAfterSIGKILL(t *testing.T) {
	dir := t.TempDir()
	data := writeSynth(t, dir, 16, "messages", 4)

	whole := tinyConfig(t, data, filepath.Join(dir, "whole.gguf"))
	whole.MaxSteps, whole.CheckpointEvery = 5, 2
	if _, err := train.Run(context.Background(), whole); err != nil {
		t.Fatal(err)
	}

	killed := tinyConfig(t, data, filepath.Join(dir, "killed.gguf"))
	killed.MaxSteps, killed.CheckpointEvery = 5, 2
	pid := 0
	killed.OnEvent = func(ev train.Event) {
		switch {
		case ev.Event == "start":
			pid = ev.PID
		case ev.Event == "step" && ev.Step == 3:
			// after the checkpoint of step 2, before the one of step 4
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Error(err)
			}
		}
	}
	_, err := train.Run(context.Background(), killed)
	if !errors.Is(err, train.ErrKilled) {
		t.Fatalf("err = %v, want ErrKilled", err)
	}
	t.Log(err)
	if _, err := os.Stat(killed.Out); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a killed run left %s (%v)", killed.Out, err)
	}
	resumed := false
	killed.OnEvent = func(ev train.Event) {
		if ev.Event == "resumed" {
			resumed = ev.Step == 2
		}
	}
	if _, err := train.Run(context.Background(), killed); err != nil {
		t.Fatal(err)
	}
	if !resumed {
		t.Fatal("the second run did not resume from the checkpoint of step 2")
	}
	a, b := tensors(t, whole.Out), tensors(t, killed.Out)
	if len(a) != len(b) {
		t.Fatalf("%d vs %d tensors", len(a), len(b))
	}
	for i := range a {
		if a[i].Name != b[i].Name || !slices.Equal(a[i].Data, b[i].Data) {
			t.Fatalf("tensor %s differs after resuming (max diff %.3g)", a[i].Name, maxAbsDiff(a[i].Data, b[i].Data))
		}
	}
}

func tensors(t *testing.T, path string) []gguf.Tensor {
	t.Helper()
	m, err := gguf.ReadModel(path)
	if err != nil {
		t.Fatal(err)
	}
	ts, err := m.Tensors()
	if err != nil {
		t.Fatal(err)
	}
	return ts
}
