//go:build llama

package train_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/agentfleet/fleet/inference/gguf"
	"github.com/agentfleet/fleet/train"
)

// TestCheckpointOfOtherRun: a finished run's checkpoint in the work folder
// does not hold back a run with other data (it starts from scratch, found
// finished by the folder's marker or, for folders of earlier versions, by
// the output it wrote); an unfinished run's checkpoint does (ErrConfig,
// saying how to go on), is kept, and its own command still resumes it.
func TestCheckpointOfOtherRun(t *testing.T) {
	dir := t.TempDir()
	data1 := writeSynth(t, dir, 12, "messages", 4)
	data2 := filepath.Join(dir, "other.jsonl")
	if err := os.Rename(writeSynth(t, t.TempDir(), 12, "messages", 5), data2); err != nil {
		t.Fatal(err)
	}
	data3 := filepath.Join(dir, "third.jsonl")
	if err := os.Rename(writeSynth(t, t.TempDir(), 12, "messages", 6), data3); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "lint.gguf")
	run := func(data string) (*train.Result, string, bool, error) {
		t.Helper()
		c := tinyConfig(t, data, out)
		c.MaxSteps, c.CheckpointEvery = 3, 2
		var log bytes.Buffer
		c.Progress = &log
		resumed := false
		c.OnEvent = func(ev train.Event) {
			if ev.Event == "resumed" {
				resumed = true
			}
		}
		r, err := train.Run(context.Background(), c)
		return r, log.String(), resumed, err
	}
	dataDigest := func() string {
		t.Helper()
		m, err := gguf.ReadModel(out)
		if err != nil {
			t.Fatal(err)
		}
		return m.KV.String(train.MetaDataDigest)
	}
	work := strings.TrimSuffix(out, ".gguf") + ".work"

	if _, _, _, err := run(data1); err != nil {
		t.Fatal(err)
	}
	d1 := dataDigest()
	// a work folder of an earlier version: no marker, the output tells
	if err := os.Remove(filepath.Join(work, "finished")); err != nil {
		t.Fatal(err)
	}
	r, log, resumed, err := run(data2)
	if err != nil {
		t.Fatalf("a run with other data after a finished one: %v\n%s", err, log)
	}
	if resumed || r.UpToDate || !strings.Contains(log, "checkpoint of a finished run with other data or settings: starting a new run") {
		t.Fatalf("resumed %v, up to date %v:\n%s", resumed, r.UpToDate, log)
	}
	if d2 := dataDigest(); d2 == d1 || d2 == "" {
		t.Fatalf("the output's data digest %q after training on other data (first %q)", d2, d1)
	}
	// the marker alone (the output moved away)
	if err := os.Remove(out); err != nil {
		t.Fatal(err)
	}
	if r, log, resumed, err = run(data1); err != nil || resumed || r.UpToDate {
		t.Fatalf("after the output was moved: %v, resumed %v\n%s", err, resumed, log)
	}
	if dataDigest() != d1 {
		t.Fatal("the third run did not train on the first data")
	}

	// An unfinished run: killed after its checkpoint of step 2.
	c := tinyConfig(t, data2, out)
	c.MaxSteps, c.CheckpointEvery = 3, 2
	pid := 0
	c.OnEvent = func(ev train.Event) {
		switch {
		case ev.Event == "start":
			pid = ev.PID
		case ev.Event == "step" && ev.Step == 3:
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Error(err)
			}
		}
	}
	if _, err := train.Run(context.Background(), c); !errors.Is(err, train.ErrKilled) {
		t.Fatalf("err = %v, want ErrKilled", err)
	}
	// (not data1: the output is up to date for it, whatever the checkpoint)
	_, log, _, err = run(data3)
	if !errors.Is(err, train.ErrConfig) || !strings.Contains(err.Error(), "unfinished run with other data or settings") ||
		!strings.Contains(err.Error(), "-fresh") {
		t.Fatalf("a run with other data over an unfinished checkpoint: %v\n%s", err, log)
	}
	if _, err := os.Stat(filepath.Join(work, "ckpt.pt")); err != nil {
		t.Fatalf("the unfinished run's checkpoint is gone: %v", err)
	}
	if _, log, resumed, err = run(data2); err != nil || !resumed {
		t.Fatalf("the unfinished run's own command: %v, resumed %v\n%s", err, resumed, log)
	}
}
