package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestQuantile(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- { // unsorted on purpose
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	if got := quantile(ds, .5); got != 51*time.Millisecond {
		t.Errorf("p50 = %s, want 51ms (index ⌊100·0.5⌋ of 1..100)", got)
	}
	if got := quantile(ds, .99); got != 100*time.Millisecond {
		t.Errorf("p99 = %s, want 100ms", got)
	}
	if ds[0] != 100*time.Millisecond {
		t.Error("quantile sorted its input in place")
	}
	if got := quantile(nil, .5); got != 0 {
		t.Errorf("quantile(nil) = %s, want 0", got)
	}
}

func TestSpread(t *testing.T) {
	s := spreadOf([]float64{3000, 1000, 2000})
	if s != (spread{Median: 2000, Min: 1000, Max: 3000}) {
		t.Errorf("spreadOf = %+v", s)
	}
	if got := spreadOf([]float64{1, 4}).Median; got != 2.5 {
		t.Errorf("median of an even count = %v, want 2.5", got)
	}
	if got := s.fmtRate(); got != "2,000 (1,000–3,000)" {
		t.Errorf("fmtRate = %q", got)
	}
	d := spreadOf([]float64{1.4e6, 1.37e6, 1.42e6})
	if got := d.fmtDur(); got != "1.4 ms (1.37–1.42)" {
		t.Errorf("fmtDur = %q", got)
	}
	if got := groupDigits(1234567.6); got != "1,234,568" {
		t.Errorf("groupDigits = %q", got)
	}
}

func TestSeenSet(t *testing.T) {
	s := newSeenSet(3)
	s.mark(0)
	s.mark(1)
	if err := s.complete(); err == nil {
		t.Error("a lost job went unnoticed")
	}
	s.mark(2)
	if err := s.complete(); err != nil {
		t.Error(err)
	}
	s.mark(2)
	if err := s.complete(); err == nil || !strings.Contains(err.Error(), "1 duplicate") {
		t.Errorf("a duplicated job: %v", err)
	}
}

func TestReadProcStat(t *testing.T) {
	st, err := readProcStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if st.ppid != os.Getppid() {
		t.Errorf("ppid = %d, want %d", st.ppid, os.Getppid())
	}
	// Burn some CPU: the process's own time must grow.
	end := time.Now().Add(50 * time.Millisecond)
	for time.Now().Before(end) {
	}
	if got := treeCPU(os.Getpid()); got < st.own+st.reaped {
		t.Errorf("treeCPU went down: %s < %s", got, st.own+st.reaped)
	}
}

func TestConfigFromEnv(t *testing.T) {
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	c, err := configFromEnv(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.Jobs != 20000 || c.Slots != 8 || c.LatencyJobs != 3000 || c.Repeats != 3 || c.Out != ".build/peers.json" {
		t.Errorf("defaults = %+v", c)
	}
	c, err = configFromEnv(env(map[string]string{"FLEET_BENCH_SLOTS": "4", "FLEET_PEERS_ONLY": "river",
		"FLEET_PEERS_ASYNQ_CHECK": "100us"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Slots != 4 || len(c.Only) != 1 || c.Only[0] != "river" || c.AsynqCheck != 100*time.Microsecond {
		t.Errorf("overrides = %+v", c)
	}
	for _, bad := range []map[string]string{
		{"FLEET_PEERS_N": "many"}, {"FLEET_PEERS_N": "0"}, {"FLEET_BENCH_SLOTS": "-1"},
		{"FLEET_PEERS_ONLY": "sidekiq"}, {"FLEET_PEERS_INSTALL": "yes"}, {"FLEET_PEERS_ASYNQ_CHECK": "0s"},
		{"FLEET_PEERS_REPEAT": "0"},
	} {
		_, err := configFromEnv(env(bad))
		var key string
		for k := range bad {
			key = k
		}
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%v: error %v does not name %s", bad, err, key)
		}
	}
}

func TestEnsurePackageSkips(t *testing.T) {
	missing := func() (string, error) { return "", errors.New("not found") }
	_, err := ensurePackage(context.Background(), false, "redis-server", missing)
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "redis-server is not installed") {
		t.Errorf("err = %v", err)
	}
	found := func() (string, error) { return "/usr/bin/true", nil }
	if p, err := ensurePackage(context.Background(), false, "x", found); err != nil || p != "/usr/bin/true" {
		t.Errorf("found: %q, %v", p, err)
	}
}

// TestRunSkips: a peer whose server cannot start is reported as skipped,
// in the table and in the JSON file, and the run still succeeds.
func TestRunSkips(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // no redis-server, no pg_config, no apt-get
	cfg := defaultConfig()
	cfg.Only, cfg.Install, cfg.Repeats = []string{"asynq"}, true, 1
	cfg.Out = filepath.Join(t.TempDir(), "peers.json")
	if err := run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(cfg.Out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"skipped": "server unavailable: redis-server is not installed`) {
		t.Errorf("JSON: %s", b)
	}
}
