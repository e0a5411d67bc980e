package llama

import (
	"bufio"
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

func TestConcurrentSlotsShareOneModel(t *testing.T) {
	t.Parallel()
	bd := setup(t, func(c *Config) { c.Lenient = true; c.MaxTokens = 16 })
	const n = 3
	var wg sync.WaitGroup
	errs := make([]error, n)
	slots := make([]*Slot, n)
	for i := range n {
		s, err := bd.b.NewSlot()
		if err != nil {
			t.Fatal(err)
		}
		slots[i] = s
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 3 {
				if _, err := s.Complete(context.Background(), baseRequest()); err != nil && !isInvalid(err) {
					errs[i] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("slot %d: %v", i, err)
		}
	}
	if len(bd.b.models) != 1 {
		t.Fatalf("%d models loaded, want 1", len(bd.b.models))
	}
	// Equal seeds and greedy decoding: every slot generated the same tokens.
	for i := 1; i < n; i++ {
		a, b := slots[0].ctxs[0].tokens, slots[i].ctxs[0].tokens
		if len(a) != len(b) {
			t.Fatalf("slot %d holds %d tokens, slot 0 %d", i, len(b), len(a))
		}
	}
}

func TestCloseFreesContexts(t *testing.T) {
	bd := setup(t, func(c *Config) { c.Lenient = true; c.MaxTokens = 4; c.ContextSize = 4096 })
	ctx := context.Background()
	run := func() {
		s, err := bd.b.NewSlot()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Complete(ctx, baseRequest()); err != nil && !isInvalid(err) {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if s.ctxs != nil {
			t.Fatal("contexts still referenced after Close")
		}
		if _, err := s.Complete(ctx, baseRequest()); !errors.Is(err, ErrClosed) {
			t.Fatalf("Complete after Close: %v, want ErrClosed", err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	run()
	start := rssAnon(t)
	const cycles = 30
	for range cycles {
		run()
	}
	// A leaked 4096-token context keeps its KV cache (~3 MiB for the tiny
	// shape) and its touched compute buffers: 30 leaks would add far more
	// than the allowance.
	if grown := rssAnon(t) - start; grown > 40<<20 {
		t.Fatalf("anonymous memory grew %d MiB over %d slot lifetimes: contexts leak", grown>>20, cycles)
	}
	if err := bd.b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := bd.b.NewSlot(); !errors.Is(err, ErrClosed) {
		t.Fatalf("NewSlot after Close: %v", err)
	}
}

// rssAnon returns the process's resident anonymous memory in bytes.
func rssAnon(t testing.TB) int64 {
	t.Helper()
	return procStatus(t, "RssAnon:")
}

func procStatus(t testing.TB, key string) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Skip("no /proc/self/status")
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), key); ok {
			kb, err := strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Skipf("%s not in /proc/self/status", key)
	return 0
}
