//go:build llama

package train

import (
	"bufio"
	"context"
	"embed"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/agentfleet/fleet/internal/textcut"
)

// trainerFiles are the trainer's Python files (py/): fleet_train.py, the
// training loop, and fleet_model.py, the Gemma 3 decoder it imports.
//
//go:embed py/*.py
var trainerFiles embed.FS

// writeTrainer writes the trainer's files into work and returns the path of
// its entry script.
func writeTrainer(work string) (string, error) {
	ents, err := trainerFiles.ReadDir("py")
	if err != nil {
		return "", err
	}
	for _, e := range ents {
		b, err := trainerFiles.ReadFile("py/" + e.Name())
		if err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(work, e.Name()), b, 0o644); err != nil {
			return "", err
		}
	}
	return filepath.Join(work, "fleet_train.py"), nil
}

// ErrEngine is wrapped when PyTorch is missing or the training process
// fails.
var ErrEngine = errors.New("train: training engine")

// ErrKilled is wrapped when the training process was killed (SIGKILL,
// which is also how the kernel ends a process out of memory). Running the
// same command again resumes from the last checkpoint.
var ErrKilled = errors.New("train: training process killed")

// ErrInterrupted is wrapped when training stopped on SIGINT/SIGTERM after
// writing a checkpoint.
var ErrInterrupted = errors.New("train: interrupted")

// Event is one JSON line the trainer prints.
type Event struct {
	Event         string   `json:"event"`
	Step          int      `json:"step"`
	Steps         int      `json:"steps"`
	StepsPerEpoch int      `json:"steps_per_epoch"`
	Epoch         int      `json:"epoch"`
	Loss          *float64 `json:"loss"`
	DevLoss       *float64 `json:"dev_loss"`
	TrainLoss     *float64 `json:"train_loss"`
	DevAccuracy   *float64 `json:"dev_accuracy"`
	// InitialDevLoss and InitialDevAccuracy are the dev split's before
	// training (for a LoRA adapter: the base model's).
	InitialDevLoss     *float64      `json:"initial_dev_loss"`
	InitialDevAccuracy *float64      `json:"initial_dev_accuracy"`
	Best               *float64      `json:"best"`
	BestStep           int           `json:"best_step"`
	Tokens             int64         `json:"tokens"`
	TokS               float64       `json:"tok_s"`
	Train              int           `json:"train"`
	Dev                int           `json:"dev"`
	Params             int64         `json:"params"`
	Trainable          int64         `json:"trainable"`
	Stopped            string        `json:"stopped"`
	History            [][3]*float64 `json:"history"`
	Code               string        `json:"code"`
	Message            string        `json:"message"`
	// PID is the trainer process (event "start").
	PID int `json:"pid"`
}

// findPython returns an interpreter that imports torch: python (when
// set), else /usr/bin/python3 (Debian's python3-torch), else python3 on
// PATH.
func findPython(ctx context.Context, python string) (string, error) {
	cands := []string{python}
	if python == "" {
		cands = []string{"/usr/bin/python3", "python3"}
	}
	var last string
	for _, c := range cands {
		out, err := exec.CommandContext(ctx, c, "-c", "import torch, numpy; print(torch.__version__)").CombinedOutput()
		if err == nil {
			return c, nil
		}
		last = fmt.Sprintf("%s: %v: %s", c, err, strings.TrimSpace(textcut.LastLines(string(out), 2)))
	}
	return "", fmt.Errorf("%w: PyTorch is not installed (%s); on Debian/Ubuntu: apt-get install python3-torch python3-numpy libopenblas0-pthread", ErrEngine, last)
}

// trainerEnv is the training process's environment: unbuffered output, and
// OpenMP threads that sleep rather than spin while they wait (unless the
// user chose): on a shared machine spinning threads fight the other
// processes for the cores, and a 2-thread step was measured 3-10x slower
// with the default policy under load (docs/TRAINING.md).
func trainerEnv() []string {
	env := append(os.Environ(), "PYTHONUNBUFFERED=1")
	if os.Getenv("OMP_WAIT_POLICY") == "" && os.Getenv("GOMP_SPINCOUNT") == "" {
		env = append(env, "OMP_WAIT_POLICY=PASSIVE")
	}
	return env
}

// runTrainer runs the training script on work and calls onEvent for every
// event line. It returns the final "done" event.
func runTrainer(ctx context.Context, python, work string, onEvent func(Event)) (*Event, error) {
	script, err := writeTrainer(work)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, python, script, work)
	cmd.Env = trainerEnv()
	// If this process dies, the trainer checkpoints and stops too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	// On cancellation ask the trainer to checkpoint and stop.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr textcut.Tail
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrEngine, err)
	}
	var done, failed *Event
	last := 0
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var ev Event
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			continue
		}
		switch ev.Event {
		case "done":
			e := ev
			done = &e
		case "error":
			e := ev
			failed = &e
		case "checkpoint", "resumed":
			last = ev.Step
		}
		onEvent(ev)
	}
	io.Copy(io.Discard, stdout)
	err = cmd.Wait()
	switch {
	case failed != nil:
		if failed.Code == "oom" {
			return nil, fmt.Errorf("%w: %s (the last checkpoint, step %d, is kept)", ErrEngine, failed.Message, last)
		}
		return nil, fmt.Errorf("%w: %s", ErrEngine, failed.Message)
	case err != nil:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			if st, ok := ee.Sys().(syscall.WaitStatus); ok && st.Signaled() && st.Signal() == syscall.SIGKILL {
				return nil, fmt.Errorf("%w (SIGKILL: out of memory or killed by hand) after checkpoint step %d; run the same command again to resume: %s", ErrKilled, last, textcut.LastLines(stderr.String(), 12))
			}
			if ee.ExitCode() == 4 || ctx.Err() != nil {
				return nil, fmt.Errorf("%w at step %d (checkpoint written); run the same command again to resume", ErrInterrupted, last)
			}
		}
		return nil, fmt.Errorf("%w: %v: %s", ErrEngine, err, textcut.LastLines(stderr.String(), 12))
	case done == nil:
		return nil, fmt.Errorf("%w: the trainer ended without a result: %s", ErrEngine, textcut.LastLines(stderr.String(), 12))
	}
	return done, nil
}

// TrainerLogits runs the trained model of work (its out.safetensors, a
// ModeModel run) in PyTorch over ids and returns the logits, positions ×
// vocabulary: the trainer's side of the check that llama.cpp computes the
// same function (docs/TRAINING.md).
func TrainerLogits(ctx context.Context, python, work string, ids []int32) ([]float32, error) {
	python, err := findPython(ctx, python)
	if err != nil {
		return nil, err
	}
	script, err := writeTrainer(work)
	if err != nil {
		return nil, err
	}
	in, out := filepath.Join(work, "logits.ids"), filepath.Join(work, "logits.f32")
	b := make([]byte, 4*len(ids))
	for i, id := range ids {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(id))
	}
	if err := os.WriteFile(in, b, 0o644); err != nil {
		return nil, err
	}
	if msg, err := exec.CommandContext(ctx, python, script, "logits", work, in, out).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("%w: %v: %s", ErrEngine, err, textcut.LastLines(string(msg), 12))
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		return nil, err
	}
	v := make([]float32, len(raw)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return v, nil
}
