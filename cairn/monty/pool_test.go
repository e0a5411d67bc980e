package monty_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentfleet/fleet/cairn/monty"
	"github.com/agentfleet/fleet/cairn/monty/montytest"
)

func TestRecycleAfterNRuns(t *testing.T) {
	t.Parallel()
	p := montytest.Pool(t, monty.Config{Size: 1, MaxRunsPerProcess: 3})
	for i := range 7 {
		out, err := p.Run(ctxT(t, 10*time.Second), script(fmt.Sprintf("%d * 2", i)), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		assertJSON(t, out.Value, fmt.Sprint(i*2))
	}
	if s := p.Stats(); s.Runs != 7 || s.Spawned != 3 || s.Recycled != 2 {
		t.Fatalf("stats %+v, want 7 runs on 3 processes", s)
	}
}

func TestSessionsAreFresh(t *testing.T) {
	t.Parallel()
	p := montytest.Pool(t, monty.Config{Size: 1})
	if _, err := p.Run(ctxT(t, 10*time.Second), script("leak = 42\nleak"), nil, nil); err != nil {
		t.Fatal(err)
	}
	_, err := p.Run(ctxT(t, 10*time.Second), script("leak"), nil, nil)
	var se *monty.ScriptError
	if !errors.As(err, &se) || se.Type != "NameError" {
		t.Fatalf("a global survived into the next run: %v", err)
	}
}

func TestConcurrentRuns(t *testing.T) {
	t.Parallel()
	p := montytest.Pool(t, monty.Config{Size: 2})
	ext := func(_ context.Context, _ string, args []any, _ map[string]any) (any, error) { return args[0], nil }
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for g := range 4 {
		wg.Go(func() {
			for i := range 10 {
				n := g*100 + i
				out, err := p.Run(ctxT(t, 20*time.Second), script("v: int = Input('v')\n(await echo(v)) + 1", async("echo")...), map[string]any{"v": n}, ext)
				if err == nil && string(out.Value) != fmt.Sprint(n+1) {
					err = fmt.Errorf("run %d: value %s", n, out.Value)
				}
				if err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestStopDuringRun(t *testing.T) {
	t.Parallel()
	p := montytest.Pool(t, monty.Config{Size: 1, MaxDuration: -1})
	started := make(chan struct{})
	ext := func(context.Context, string, []any, map[string]any) (any, error) {
		close(started)
		return nil, nil
	}
	done := make(chan error, 1)
	go func() {
		_, err := p.Run(context.Background(), script("await ready()\nwhile True:\n    pass", async("ready")...), nil, ext)
		done <- err
	}()
	<-started
	p.Stop()
	if err := <-done; !errors.Is(err, monty.ErrStopped) {
		t.Fatalf("err %v", err)
	}
	if _, err := p.Run(context.Background(), script("1"), nil, nil); !errors.Is(err, monty.ErrStopped) {
		t.Fatalf("Run after Stop: %v", err)
	}
}

func TestWaitForFreeProcessHonoursCtx(t *testing.T) {
	t.Parallel()
	p := montytest.Pool(t, monty.Config{Size: 1})
	release := make(chan struct{})
	entered := make(chan struct{})
	ext := func(context.Context, string, []any, map[string]any) (any, error) {
		close(entered)
		<-release
		return nil, nil
	}
	done := make(chan error, 1)
	go func() {
		_, err := p.Run(context.Background(), script("await hold()", async("hold")...), nil, ext)
		done <- err
	}()
	<-entered
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := p.Run(ctx, script("1"), nil, nil); !errors.Is(err, monty.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestStartRejectsWrongBinary(t *testing.T) {
	t.Parallel()
	real := montytest.Binary(t)
	hashOf := func(path string) string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.Sum256(b)
		return hex.EncodeToString(h[:])
	}
	tests := []struct {
		name string
		cfg  monty.Config
		want string
	}{
		{"wrong hash", monty.Config{Binary: "/bin/true"}, "sha256"},
		{"missing", monty.Config{Binary: "/nonexistent/monty"}, "no such file"},
		{"not monty: exits", monty.Config{Binary: "/bin/true", SHA256: hashOf("/bin/true")}, "self-test"},
		{"not monty: echoes", monty.Config{Binary: "/bin/cat", SHA256: hashOf("/bin/cat"), StartTimeout: time.Second}, "self-test"},
		{"pinned hash mismatch on the real binary", monty.Config{Binary: real, SHA256: strings.Repeat("0", 64)}, "sha256"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := monty.NewPool(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			err = p.Start(ctxT(t, 20*time.Second))
			if !errors.Is(err, monty.ErrBadBinary) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Start: %v, want ErrBadBinary mentioning %q", err, tt.want)
			}
			p.Stop()
			if _, err := p.Run(context.Background(), script("1"), nil, nil); !errors.Is(err, monty.ErrStopped) {
				t.Fatalf("Run on a failed pool: %v", err)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, cfg := range []monty.Config{
		{},
		{Binary: "x", Size: -1},
		{Binary: "x", MemoryLimit: -2},
		{Binary: "x", MaxDuration: time.Microsecond},
		{Binary: "x", MaxRunsPerProcess: -2},
		{Binary: "x", MaxValueBytes: 1 << 30},
	} {
		if _, err := monty.NewPool(cfg); err == nil {
			t.Errorf("NewPool(%+v) accepted", cfg)
		}
	}
	p, err := monty.NewPool(monty.Config{Binary: "x"})
	if err != nil {
		t.Fatal(err)
	}
	p.Stop() // before Start: a no-op
	p.Stop()
}
