package agentkv_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/agents/agentkv"
)

// TestWatcherFollowsVersionsAndKeepsOldOnes: a pushed version replaces the
// one new jobs get, the old definition stays usable (its files on disk),
// and a corrupt entry or an agent that does not load keeps the previous
// version in service.
func TestWatcherFollowsVersionsAndKeepsOldOnes(t *testing.T) {
	_, js := startJS(t)
	ctx := ctxT(t)
	kv, err := agentkv.Ensure(ctx, js, agentkv.BucketConfig{})
	if err != nil {
		t.Fatal(err)
	}
	root := writeAgents(t, "4")
	push := func() agentkv.PushResult {
		t.Helper()
		bs, err := agentkv.Collect(root, agents.LoadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		r, err := agentkv.Push(ctx, kv, bs[0], "t")
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	push() // v1 exists before the watcher starts

	updates := make(chan agentkv.Update, 16)
	w, err := agentkv.NewWatcher(agentkv.WatchConfig{KV: kv, CacheDir: filepath.Join(t.TempDir(), "cache"),
		OnUpdate: func(u agentkv.Update) { updates <- u }})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	next := func() agentkv.Update {
		t.Helper()
		select {
		case u := <-updates:
			return u
		case <-time.After(20 * time.Second):
			t.Fatal("no watcher update")
		}
		return agentkv.Update{}
	}
	if u := next(); u.Version != 1 || u.Err != nil {
		t.Fatalf("initial update %+v", u)
	}
	v1, ok := w.Lookup("lint")
	if !ok || v1.Version != 1 || v1.Def.MaxTurns != 4 {
		t.Fatalf("lookup after start = %+v, %v", v1, ok)
	}
	if ops := w.Operations(); len(ops) != 1 || ops[0] != "lint" {
		t.Fatalf("operations %v", ops)
	}

	write(t, filepath.Join(root, "lint", "agent.yaml"), strings.ReplaceAll(agentYAML, "%TURNS%", "7"))
	push()
	if u := next(); u.Version != 2 || u.Err != nil {
		t.Fatalf("update %+v, want version 2", u)
	}
	v2, _ := w.Lookup("lint")
	if v2.Version != 2 || v2.Def.MaxTurns != 7 {
		t.Fatalf("lookup = version %d max_turns %d, want 2 and 7", v2.Version, v2.Def.MaxTurns)
	}
	// The old version's definition and tool files are still there.
	if v1.Def.MaxTurns != 4 {
		t.Fatal("the old definition changed")
	}
	if _, err := os.Stat(v1.Def.ResolvePath(v1.Def.Tools[0].Pym)); err != nil {
		t.Fatalf("old version's tool file: %v", err)
	}

	// The same version written again (by hand) keeps the loaded one: its
	// folder may be in use.
	e, err := kv.Get(ctx, "lint")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "lint", e.Value()); err != nil {
		t.Fatal(err)
	}
	if u := next(); u.Version != 2 || u.Err != nil {
		t.Fatalf("same version again: %+v", u)
	}
	if a, _ := w.Lookup("lint"); a != v2 {
		t.Fatal("the same version was loaded again")
	}

	// A corrupt entry: logged, version 2 stays.
	if _, err := kv.Put(ctx, "lint", []byte("{garbage")); err != nil {
		t.Fatal(err)
	}
	if u := next(); u.Err == nil || u.Version != 2 {
		t.Fatalf("corrupt entry update %+v, want an error and version 2 kept", u)
	}
	if a, _ := w.Lookup("lint"); a.Version != 2 {
		t.Fatalf("after a corrupt entry lookup gives version %d", a.Version)
	}
	// A bundle that is well formed but does not load (a broken YAML
	// written straight into the bucket, bypassing push): version 2 stays.
	bs, err := agentkv.Collect(root, agents.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b := bs[0]
	b.Files["lint/agent.yaml"] = []byte("name: [unclosed\n")
	b.Digest, b.Version = agentkv.Digest(b.Files), 3
	data, _ := jsonMarshal(b)
	if _, err := kv.Put(ctx, "lint", data); err != nil {
		t.Fatal(err)
	}
	if u := next(); u.Err == nil || u.Version != 2 || !strings.Contains(u.Err.Error(), "not valid YAML") {
		t.Fatalf("broken agent update %+v", u)
	}
	// A push after the corrupt entries continues the numbering.
	write(t, filepath.Join(root, "lint", "agent.yaml"), strings.ReplaceAll(agentYAML, "%TURNS%", "9"))
	if r := push(); r.Version != 4 && r.Version != 3 {
		t.Fatalf("push after corrupt entries: version %d", r.Version)
	}
	if u := next(); u.Err != nil || u.Version < 3 {
		t.Fatalf("update %+v", u)
	}
	if a, _ := w.Lookup("lint"); a.Def.MaxTurns != 9 {
		t.Fatalf("max_turns %d, want 9", a.Def.MaxTurns)
	}
	// Deleting the key withdraws the pushed agent.
	if err := kv.Delete(ctx, "lint"); err != nil {
		t.Fatal(err)
	}
	if u := next(); !u.Deleted {
		t.Fatalf("update %+v, want deleted", u)
	}
	if _, ok := w.Lookup("lint"); ok {
		t.Fatal("deleted agent still served")
	}
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }
