package metrics

import (
	"context"
	"errors"
	"fmt"
	"github.com/agentfleet/fleet/internal/testutil"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/goleak"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/queue"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testutil.NATSLeakIgnores()...)
}

// startServer serves reg on a random port; stopped at cleanup.
func startServer(t *testing.T, reg prometheus.Gatherer, ready func(context.Context) error) *Server {
	t.Helper()
	srv, err := NewServer(Config{Listen: "127.0.0.1:0", Gatherer: reg, Ready: ready})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return srv
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// scrape fetches /metrics over HTTP and parses the text format.
func scrape(t *testing.T, srv *Server) map[string]*dto.MetricFamily {
	t.Helper()
	code, body := get(t, "http://"+srv.Addr()+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics = %d: %s", code, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v\n%s", err, body)
	}
	return mfs
}

// value sums the series of family name whose labels include labels
// (name=value pairs): counters' and gauges' values, histograms' sample
// counts. ok is false when there is no such series.
func value(mfs map[string]*dto.MetricFamily, name string, labels ...string) (v float64, ok bool) {
	mf := mfs[name]
	if mf == nil {
		return 0, false
	}
next:
	for _, m := range mf.GetMetric() {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, lp := range m.GetLabel() {
				if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		ok = true
		switch {
		case m.Counter != nil:
			v += m.Counter.GetValue()
		case m.Gauge != nil:
			v += m.Gauge.GetValue()
		case m.Histogram != nil:
			v += float64(m.Histogram.GetSampleCount())
		}
	}
	return v, ok
}

func histSum(mfs map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	mf := mfs[name]
	if mf == nil {
		return -1
	}
next:
	for _, m := range mf.GetMetric() {
		for i := 0; i+1 < len(labels); i += 2 {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == labels[i] && lp.GetValue() != labels[i+1] {
					continue next
				}
			}
		}
		if m.Histogram != nil {
			return m.Histogram.GetSampleSum()
		}
	}
	return -1
}

func want(t *testing.T, mfs map[string]*dto.MetricFamily, expect float64, name string, labels ...string) {
	t.Helper()
	v, ok := value(mfs, name, labels...)
	if !ok {
		t.Errorf("%s%v: no such series", name, labels)
		return
	}
	if v != expect {
		t.Errorf("%s%v = %v, want %v", name, labels, v, expect)
	}
}

// runEvents is one two-turn run as the loop would emit it.
func runEvents(t0 time.Time) []fleettype.Event {
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	return []fleettype.Event{
		{Kind: fleettype.EventTurnStarted, Seq: 1, Turn: 1, Time: at(0), MaxTurns: 6},
		{Kind: fleettype.EventModelOutput, Seq: 2, Turn: 1, Time: at(400), Calls: []string{"run_ruff"}, Duration: 400 * time.Millisecond,
			Usage: &fleettype.Usage{PromptTokens: 1000, CachedTokens: 200, CompletionTokens: 20, ForcedTokens: 5,
				PromptDuration: 200 * time.Millisecond, CompletionDuration: 200 * time.Millisecond}},
		{Kind: fleettype.EventToolCall, Seq: 3, Turn: 1, Time: at(401), Tool: "run_ruff", CallID: "c1"},
		{Kind: fleettype.EventToolResult, Seq: 4, Turn: 1, Time: at(451), Tool: "run_ruff", CallID: "c1", OK: true, Duration: 50 * time.Millisecond},
		{Kind: fleettype.EventTurnStarted, Seq: 5, Turn: 2, Time: at(500), MaxTurns: 6},
		{Kind: fleettype.EventInvalidResponse, Seq: 6, Turn: 2, Time: at(600), Code: "AGENT_001"},
		{Kind: fleettype.EventRetry, Seq: 7, Turn: 2, Time: at(600), Code: "AGENT_001", Attempt: 1},
		{Kind: fleettype.EventModelOutput, Seq: 8, Turn: 2, Time: at(800), Calls: []string{"submit_result"}, Duration: 200 * time.Millisecond,
			Usage: &fleettype.Usage{PromptTokens: 1100, CachedTokens: 1000, CompletionTokens: 10, CompletionDuration: 100 * time.Millisecond}},
		{Kind: fleettype.EventToolCall, Seq: 9, Turn: 2, Time: at(801), Tool: "submit_result", CallID: "c2"},
		{Kind: fleettype.EventToolResult, Seq: 10, Turn: 2, Time: at(802), Tool: "submit_result", CallID: "c2", OK: false, Code: "TOOL_002", Duration: time.Millisecond},
		{Kind: fleettype.EventFinished, Seq: 11, Turn: 2, Time: at(900), Status: fleettype.StatusSuccess},
	}
}

func TestScrapeShowsJobAndEventMetrics(t *testing.T) {
	reg := NewRegistry()
	m, err := New(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.AddOperations("lint")
	m.SetSlots(4)
	srv := startServer(t, reg, nil)

	before := scrape(t, srv)
	want(t, before, 0, "fleet_jobs_total", "operation", "lint", "outcome", "succeeded")
	want(t, before, 0, "fleet_slots_busy")
	want(t, before, 4, "fleet_slots")
	if _, ok := before["go_goroutines"]; !ok {
		t.Error("NewRegistry has no Go collector")
	}

	m.JobStarted("lint")
	during := scrape(t, srv)
	want(t, during, 1, "fleet_slots_busy")

	sink := m.EventSink("lint")
	for _, e := range runEvents(time.Unix(1000, 0)) {
		sink.Emit(e)
	}
	m.JobFinished("lint", OutcomeSucceeded, 1500*time.Millisecond)

	after := scrape(t, srv)
	want(t, after, 0, "fleet_slots_busy")
	want(t, after, 1, "fleet_jobs_total", "operation", "lint", "outcome", "succeeded")
	want(t, after, 0, "fleet_jobs_total", "operation", "lint", "outcome", "failed")
	want(t, after, 1, "fleet_job_duration_seconds", "operation", "lint", "outcome", "succeeded")
	if s := histSum(after, "fleet_job_duration_seconds"); s != 1.5 {
		t.Errorf("job duration sum = %v, want 1.5", s)
	}
	want(t, after, 2, "fleet_turns_total", "operation", "lint")
	want(t, after, 2, "fleet_turn_duration_seconds", "operation", "lint")
	// turn 1: 0 -> 500 ms, turn 2: 500 -> 900 ms
	if s := histSum(after, "fleet_turn_duration_seconds"); s < 0.8999 || s > 0.9001 {
		t.Errorf("turn duration sum = %v, want 0.9", s)
	}
	want(t, after, 2, "fleet_model_call_duration_seconds", "operation", "lint")
	want(t, after, 2100, "fleet_model_tokens_total", "operation", "lint", "kind", "prompt")
	want(t, after, 1200, "fleet_model_tokens_total", "operation", "lint", "kind", "cached")
	want(t, after, 30, "fleet_model_tokens_total", "operation", "lint", "kind", "completion")
	want(t, after, 5, "fleet_model_tokens_total", "operation", "lint", "kind", "forced")
	// completion: 20/0.2 s = 100 and 10/0.1 s = 100; prompt: 800/0.2 s = 4000
	want(t, after, 2, "fleet_model_tokens_per_second", "operation", "lint", "phase", "completion")
	if s := histSum(after, "fleet_model_tokens_per_second", "phase", "completion"); s < 199.99 || s > 200.01 {
		t.Errorf("completion tokens/s sum = %v, want 200", s)
	}
	want(t, after, 1, "fleet_model_tokens_per_second", "operation", "lint", "phase", "prompt")
	want(t, after, 1, "fleet_tool_call_duration_seconds", "operation", "lint", "tool", "run_ruff", "ok", "true")
	want(t, after, 1, "fleet_tool_call_duration_seconds", "operation", "lint", "tool", "submit_result", "ok", "false")
	want(t, after, 1, "fleet_model_retries_total", "operation", "lint", "code", "AGENT_001")
	want(t, after, 1, "fleet_model_invalid_responses_total", "operation", "lint", "code", "AGENT_001")
	want(t, after, 1, "fleet_agent_runs_total", "operation", "lint", "status", "success")
}

func TestFuncCollector(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg)
	if err != nil {
		t.Fatal(err)
	}
	srv := startServer(t, reg, nil)
	mfs := scrape(t, srv)
	if _, ok := mfs["fleet_queue_depth"]; ok {
		t.Error("queue depth reported without a function")
	}
	if _, ok := mfs["fleet_events_dropped_total"]; ok {
		t.Error("events dropped reported without a stats function")
	}

	var fail atomic.Bool
	m.SetQueueDepthFunc(func(ctx context.Context) (map[string]float64, error) {
		if _, ok := ctx.Deadline(); !ok {
			return nil, errors.New("no deadline")
		}
		if fail.Load() {
			return nil, errors.New("nats down")
		}
		return map[string]float64{"lint": 3, "fix": 0}, nil
	})
	var st queue.Stats
	m.SetWorkerStats(func() queue.Stats { return st })
	st = queue.Stats{Started: 5, Succeeded: 3, Failed: 1, Canceled: 1, Dead: 2, Duplicates: 1, Retried: 4, Requeued: 1, EventsDropped: 7}

	mfs = scrape(t, srv)
	want(t, mfs, 3, "fleet_queue_depth", "operation", "lint")
	want(t, mfs, 0, "fleet_queue_depth", "operation", "fix")
	want(t, mfs, 0, "fleet_queue_depth_errors_total")
	want(t, mfs, 7, "fleet_events_dropped_total")
	want(t, mfs, 5, "fleet_worker_jobs_started_total")
	want(t, mfs, 3, "fleet_worker_results_total", "state", "succeeded")
	want(t, mfs, 1, "fleet_worker_results_total", "state", "canceled")
	want(t, mfs, 2, "fleet_worker_dead_letters_total")
	want(t, mfs, 4, "fleet_worker_retries_total")

	fail.Store(true)
	mfs = scrape(t, srv)
	if _, ok := mfs["fleet_queue_depth"]; ok {
		t.Error("queue depth reported although its function failed")
	}
	want(t, mfs, 1, "fleet_queue_depth_errors_total")

	m.SetQueueDepthFunc(nil)
	m.SetWorkerStats(nil)
	mfs = scrape(t, srv)
	if _, ok := mfs["fleet_queue_depth_errors_total"]; ok {
		t.Error("queue depth errors still reported after SetQueueDepthFunc(nil)")
	}
}

func TestHealthAndReadiness(t *testing.T) {
	reg := prometheus.NewRegistry()
	var ready atomic.Bool
	srv := startServer(t, reg, func(ctx context.Context) error {
		if !ready.Load() {
			return fmt.Errorf("%w: slots not started", ErrNotReady)
		}
		return nil
	})
	base := "http://" + srv.Addr()
	if code, body := get(t, base+"/healthz"); code != 200 || body != "ok\n" {
		t.Fatalf("/healthz = %d %q", code, body)
	}
	if code, body := get(t, base+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "slots not started") {
		t.Fatalf("/readyz before ready = %d %q", code, body)
	}
	ready.Store(true)
	if code, body := get(t, base+"/readyz"); code != 200 || body != "ready\n" {
		t.Fatalf("/readyz when ready = %d %q", code, body)
	}
	ready.Store(false)
	if code, _ := get(t, base+"/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz after unready = %d", code)
	}
	if code, _ := get(t, base+"/nope"); code != http.StatusNotFound {
		t.Fatalf("/nope = %d", code)
	}
}

func TestNewAndServerErrors(t *testing.T) {
	if _, err := New(nil); !errors.Is(err, ErrNilRegisterer) {
		t.Errorf("New(nil) = %v", err)
	}
	reg := prometheus.NewRegistry()
	if _, err := New(reg); err != nil {
		t.Fatal(err)
	}
	if _, err := New(reg); err == nil || !strings.Contains(err.Error(), "register") {
		t.Errorf("second New on one registry = %v, want a registration error", err)
	}
	for _, c := range []Config{
		{Gatherer: reg},
		{Listen: "nocolon", Gatherer: reg},
		{Listen: "127.0.0.1:0"},
		{Listen: "127.0.0.1:0", Gatherer: reg, ReadyTimeout: -1},
	} {
		if _, err := NewServer(c); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("NewServer(%+v) = %v, want ErrInvalidConfig", c, err)
		}
	}

	// A port in use is a clear error; Stop before Start and twice is fine.
	srv := startServer(t, reg, nil)
	other, err := NewServer(Config{Listen: srv.Addr(), Gatherer: reg})
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "listen") {
		t.Errorf("Start on a busy port = %v", err)
	}
	if err := other.Stop(); err != nil {
		t.Error(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		t.Errorf("second Start = %v", err)
	}
	if err := srv.Stop(); err != nil {
		t.Error(err)
	}
	if err := srv.Stop(); err != nil {
		t.Error(err)
	}
	if err := srv.Start(context.Background()); err == nil {
		t.Error("Start after Stop succeeded")
	}
}

func TestEventSinkDoesNotBlockAndIsPerRun(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg)
	if err != nil {
		t.Fatal(err)
	}
	// Two runs interleaved: each sink times its own turns.
	a, b := m.EventSink("lint"), m.EventSink("lint")
	t0 := time.Unix(0, 0)
	a.Emit(fleettype.Event{Kind: fleettype.EventTurnStarted, Time: t0})
	b.Emit(fleettype.Event{Kind: fleettype.EventTurnStarted, Time: t0.Add(time.Second)})
	a.Emit(fleettype.Event{Kind: fleettype.EventFinished, Time: t0.Add(2 * time.Second), Status: fleettype.StatusFailed})
	b.Emit(fleettype.Event{Kind: fleettype.EventFinished, Time: t0.Add(5 * time.Second), Status: fleettype.StatusFailed})
	// An event without a time, a negative duration, no usage: no panic, no
	// negative observation.
	b.Emit(fleettype.Event{Kind: fleettype.EventModelOutput, Duration: -time.Second})
	b.Emit(fleettype.Event{Kind: fleettype.EventToolResult, Tool: "x", Duration: -time.Second})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		byName[mf.GetName()] = mf
	}
	want(t, byName, 2, "fleet_turn_duration_seconds", "operation", "lint")
	if s := histSum(byName, "fleet_turn_duration_seconds"); s != 6 {
		t.Errorf("turn duration sum = %v, want 2+4", s)
	}
	want(t, byName, 2, "fleet_agent_runs_total", "status", "failed")
	if s := histSum(byName, "fleet_tool_call_duration_seconds"); s != 0 {
		t.Errorf("negative tool duration observed: sum %v", s)
	}
	want(t, byName, 0, "fleet_model_call_duration_seconds")
}

func BenchmarkEventSink(b *testing.B) {
	m, err := New(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	evs := runEvents(time.Unix(1000, 0))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		s := m.EventSink("lint")
		for _, e := range evs {
			s.Emit(e)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(evs)), "ns/event")
}
