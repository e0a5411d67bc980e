// Package metrics is the worker's Prometheus instrumentation and its HTTP
// endpoints (/metrics, /healthz, /readyz).
//
// Everything is registered on an injected prometheus.Registerer: no package
// globals, no default registry, so tests and several workers in one process
// do not collide.
//
// What is measured:
//   - jobs, by operation and outcome, and their latency (Handler wraps a
//     queue.Handler and calls JobStarted/JobFinished);
//   - per-turn, per-model-call and per-tool-call latency, token counts and
//     tokens per second, derived from the loop's events (EventSink);
//   - slots busy (and configured), queue depth per operation and the worker's
//     own counters (duplicates, retries, dead letters, events dropped), read
//     at scrape time from functions the worker supplies;
//   - the NATS connection: disconnects and reconnects counted (NATSDisconnected,
//     NATSReconnected) and whether it is up now (SetNATSConnectedFunc).
//
// Hook-up in cmd/worker (a few lines; nc is the *nats.Conn, w the
// *queue.Worker, log the *slog.Logger):
//
//	reg := metrics.NewRegistry()           // Go and process collectors included
//	met, err := metrics.New(reg)
//	if err != nil { ... }
//	met.AddOperations(ops...)              // series at 0 before the first job
//	qcfg.NewHandler = func(i int) (queue.Handler, error) {
//		h, err := newHandler(i)            // the real handler
//		if err != nil { return nil, err }
//		return met.Handler(h), nil          // job + loop-event metrics
//	}
//	w, err := queue.NewWorker(qcfg)
//	met.SetSlots(w.Config().Slots)
//	met.SetWorkerStats(w.Stats)
//	met.SetQueueDepthFunc(metrics.WorkerQueueDepth(w))
//	if cfg.Worker.MetricsListen != "" {
//		srv, err := metrics.NewServer(metrics.Config{Listen: cfg.Worker.MetricsListen,
//			Gatherer: reg, Ready: metrics.WorkerReady(nc, w), Logger: log})
//		if err != nil { ... }
//		if err := srv.Start(ctx); err != nil { ... }
//		defer srv.Stop()
//	}
//	err = w.Start(ctx) // after the server: /readyz says "not ready" until then
package metrics

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/queue"
	"github.com/agentfleet/fleet/queue/wire"
)

// Job outcomes, the outcome label of fleet_jobs_total and
// fleet_job_duration_seconds as Handler reports them.
const (
	// OutcomeSucceeded: the agent finished with status success or skipped.
	OutcomeSucceeded = "succeeded"
	// OutcomeFailed: the agent finished with status failed.
	OutcomeFailed = "failed"
	// OutcomeCanceled: the job was canceled on request.
	OutcomeCanceled = "canceled"
	// OutcomeRequeued: the worker shut down and handed the job back.
	OutcomeRequeued = "requeued"
	// OutcomeRetry: the processor returned a transient error.
	OutcomeRetry = "retry"
	// OutcomePanic: the processor panicked (or returned no outcome).
	OutcomePanic = "panic"
)

// ErrNilRegisterer is returned by New for a nil registerer.
var ErrNilRegisterer = errors.New("metrics: nil prometheus.Registerer")

// DefaultScrapeTimeout bounds the queue-depth function at each scrape.
const DefaultScrapeTimeout = 2 * time.Second

// Metrics holds the worker's collectors. Its methods are safe for concurrent
// use and never block on I/O (queue depth is read only at scrape time).
type Metrics struct {
	jobs          *prometheus.CounterVec
	jobDuration   *prometheus.HistogramVec
	slotsBusy     prometheus.Gauge
	slots         prometheus.Gauge
	turns         *prometheus.CounterVec
	turnDuration  *prometheus.HistogramVec
	modelDuration *prometheus.HistogramVec
	tokens        *prometheus.CounterVec
	tokensPerSec  *prometheus.HistogramVec
	toolDuration  *prometheus.HistogramVec
	retries       *prometheus.CounterVec
	invalid       *prometheus.CounterVec
	runs          *prometheus.CounterVec
	natsDown      prometheus.Counter
	natsUp        prometheus.Counter

	fc  *funcCollector
	ops sync.Map // operation -> *opSeries
}

// NewRegistry returns a registry with the Go runtime and process collectors,
// ready for New and for Config.Gatherer.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// New creates the collectors and registers them on reg. Registering twice on
// the same registry fails (the metric names are taken).
func New(reg prometheus.Registerer) (*Metrics, error) {
	if reg == nil {
		return nil, ErrNilRegisterer
	}
	m := &Metrics{
		jobs: counterVec("fleet_jobs_total",
			"Jobs processed by this worker, by operation and outcome (succeeded, failed, canceled, requeued, retry, panic).",
			"operation", "outcome"),
		jobDuration: histogramVec("fleet_job_duration_seconds",
			"Wall time of one job attempt in the processor, by operation and outcome.",
			prometheus.ExponentialBucketsRange(0.05, 1800, 16), "operation", "outcome"),
		slotsBusy: prometheus.NewGauge(prometheus.GaugeOpts{Name: "fleet_slots_busy",
			Help: "Slots running a job now."}),
		slots: prometheus.NewGauge(prometheus.GaugeOpts{Name: "fleet_slots",
			Help: "Slots this worker runs (jobs at once)."}),
		turns: counterVec("fleet_turns_total",
			"Agent loop turns started, by operation.",
			"operation"),
		turnDuration: histogramVec("fleet_turn_duration_seconds",
			"Wall time of one agent loop turn (model call, tool calls, up to the next turn or the end), by operation.",
			prometheus.ExponentialBucketsRange(0.01, 600, 16), "operation"),
		modelDuration: histogramVec("fleet_model_call_duration_seconds",
			"Wall time of one model call that produced output, by operation.",
			prometheus.ExponentialBucketsRange(0.005, 300, 16), "operation"),
		tokens: counterVec("fleet_model_tokens_total",
			"Model tokens, by operation and kind: prompt (all prompt tokens), cached (prompt tokens reused from the KV cache), completion (generated), forced (completion tokens appended by the grammar without sampling).",
			"operation", "kind"),
		tokensPerSec: histogramVec("fleet_model_tokens_per_second",
			"Model speed per call, by operation and phase: prompt (uncached prompt tokens / prefill time) and completion (generated tokens / generation time).",
			prometheus.ExponentialBuckets(0.5, 2, 16), "operation", "phase"),
		toolDuration: histogramVec("fleet_tool_call_duration_seconds",
			"Wall time of one tool call, by operation, tool and whether it succeeded.",
			prometheus.ExponentialBucketsRange(0.001, 120, 16), "operation", "tool", "ok"),
		retries: counterVec("fleet_model_retries_total",
			"Model calls retried by the loop, by operation and reason code.",
			"operation", "code"),
		invalid: counterVec("fleet_model_invalid_responses_total",
			"Model outputs the loop could not use, by operation and code.",
			"operation", "code"),
		runs: counterVec("fleet_agent_runs_total",
			"Agent runs that finished, by operation and agent status (success, failed, skipped).",
			"operation", "status"),
		natsDown: prometheus.NewCounter(prometheus.CounterOpts{Name: "fleet_nats_disconnects_total",
			Help: "Times the worker's NATS connection dropped."}),
		natsUp: prometheus.NewCounter(prometheus.CounterOpts{Name: "fleet_nats_reconnects_total",
			Help: "Times the worker's NATS connection came back after a drop."}),
		fc: newFuncCollector(),
	}
	for _, c := range []prometheus.Collector{m.jobs, m.jobDuration, m.slotsBusy, m.slots, m.turns, m.turnDuration,
		m.modelDuration, m.tokens, m.tokensPerSec, m.toolDuration, m.retries, m.invalid, m.runs, m.natsDown, m.natsUp, m.fc} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("metrics: register: %w", err)
		}
	}
	return m, nil
}

// counterVec and histogramVec build the labelled collectors New registers.
func counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

func histogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
}

// AddOperations creates the per-operation series at zero, so dashboards and
// rate() see them before the first job.
func (m *Metrics) AddOperations(ops ...string) {
	for _, op := range ops {
		for _, o := range []string{OutcomeSucceeded, OutcomeFailed} {
			m.jobs.WithLabelValues(op, o)
		}
		m.turns.WithLabelValues(op)
		for _, k := range []string{"prompt", "cached", "completion"} {
			m.tokens.WithLabelValues(op, k)
		}
	}
}

// SetSlots sets fleet_slots, the number of slots the worker runs.
func (m *Metrics) SetSlots(n int) { m.slots.Set(float64(n)) }

// JobStarted marks a slot busy with a job of operation op.
func (m *Metrics) JobStarted(op string) { m.slotsBusy.Inc() }

// JobFinished frees the slot and counts the job with its outcome and
// duration. Call it once per JobStarted.
func (m *Metrics) JobFinished(op, outcome string, d time.Duration) {
	m.slotsBusy.Dec()
	m.jobs.WithLabelValues(op, outcome).Inc()
	m.jobDuration.WithLabelValues(op, outcome).Observe(d.Seconds())
}

// SetQueueDepthFunc sets the function read at each scrape for
// fleet_queue_depth{operation}: jobs waiting per operation. It gets a context
// bounded by DefaultScrapeTimeout; on error the series is left out of that
// scrape and fleet_queue_depth_errors_total counts it. nil removes it.
func (m *Metrics) SetQueueDepthFunc(f func(ctx context.Context) (map[string]float64, error)) {
	m.fc.depth.Store(&f)
}

// SetWorkerStats sets the function read at each scrape for the worker's
// counters (fleet_worker_*_total and fleet_events_dropped_total); pass
// (*queue.Worker).Stats. nil removes them.
func (m *Metrics) SetWorkerStats(f func() queue.Stats) {
	m.fc.stats.Store(&f)
}

// EventSink returns a sink that turns one run's loop events into metrics.
// Use a new sink per run (it keeps the run's turn timing); Emit never blocks.
func (m *Metrics) EventSink(operation string) loop.EventSink {
	return &runSink{opSeries: m.series(operation)}
}

// opSeries caches one operation's series, so that a run's sink does no label
// lookups for the fixed ones.
type opSeries struct {
	m  *Metrics
	op string

	turns                              prometheus.Counter
	turnDuration, modelDuration        prometheus.Observer
	prompt, cached, completion, forced prometheus.Counter
	promptTPS, completionTPS           prometheus.Observer
	tools                              sync.Map // toolKey -> prometheus.Observer
}

func (m *Metrics) series(op string) *opSeries {
	if s, ok := m.ops.Load(op); ok {
		return s.(*opSeries)
	}
	s, _ := m.ops.LoadOrStore(op, &opSeries{m: m, op: op,
		turns:         m.turns.WithLabelValues(op),
		turnDuration:  m.turnDuration.WithLabelValues(op),
		modelDuration: m.modelDuration.WithLabelValues(op),
		prompt:        m.tokens.WithLabelValues(op, "prompt"),
		cached:        m.tokens.WithLabelValues(op, "cached"),
		completion:    m.tokens.WithLabelValues(op, "completion"),
		forced:        m.tokens.WithLabelValues(op, "forced"),
		promptTPS:     m.tokensPerSec.WithLabelValues(op, "prompt"),
		completionTPS: m.tokensPerSec.WithLabelValues(op, "completion"),
	})
	return s.(*opSeries)
}

type toolKey struct {
	name string
	ok   bool
}

func (o *opSeries) tool(name string, ok bool) prometheus.Observer {
	key := toolKey{name, ok}
	if h, found := o.tools.Load(key); found {
		return h.(prometheus.Observer)
	}
	okv := "false"
	if ok {
		okv = "true"
	}
	h := o.m.toolDuration.WithLabelValues(o.op, name, okv)
	o.tools.Store(key, h)
	return h
}

// runSink is one run's EventSink.
type runSink struct {
	*opSeries
	mu        sync.Mutex
	turnStart time.Time
}

func (s *runSink) Emit(e fleettype.Event) {
	now := e.Time
	if now.IsZero() {
		now = time.Now()
	}
	switch e.Kind {
	case fleettype.EventTurnStarted:
		s.turns.Inc()
		s.endTurn(now, true)
	case fleettype.EventModelOutput:
		if e.Duration > 0 {
			s.modelDuration.Observe(e.Duration.Seconds())
		}
		if u := e.Usage; u != nil {
			s.prompt.Add(float64(max(u.PromptTokens, 0)))
			s.cached.Add(float64(max(u.CachedTokens, 0)))
			s.completion.Add(float64(max(u.CompletionTokens, 0)))
			s.forced.Add(float64(max(u.ForcedTokens, 0)))
			if n := u.PromptTokens - u.CachedTokens; n > 0 && u.PromptDuration > 0 {
				s.promptTPS.Observe(float64(n) / u.PromptDuration.Seconds())
			}
			gen := u.CompletionDuration
			if gen <= 0 && u.PromptDuration <= 0 {
				gen = e.Duration // a backend that only reports the call's time
			}
			if u.CompletionTokens > 0 && gen > 0 {
				s.completionTPS.Observe(float64(u.CompletionTokens) / gen.Seconds())
			}
		}
	case fleettype.EventToolResult:
		s.tool(e.Tool, e.OK).Observe(max(e.Duration, 0).Seconds())
	case fleettype.EventRetry:
		s.m.retries.WithLabelValues(s.op, e.Code).Inc()
	case fleettype.EventInvalidResponse:
		s.m.invalid.WithLabelValues(s.op, e.Code).Inc()
	case fleettype.EventFinished:
		s.endTurn(now, false)
		s.m.runs.WithLabelValues(s.op, string(e.Status)).Inc()
	}
}

// endTurn observes the running turn's duration (if any) and starts the next
// one when next is set.
func (s *runSink) endTurn(now time.Time, next bool) {
	s.mu.Lock()
	start := s.turnStart
	s.turnStart = time.Time{}
	if next {
		s.turnStart = now
	}
	s.mu.Unlock()
	if !start.IsZero() {
		s.turnDuration.Observe(max(now.Sub(start), 0).Seconds())
	}
}

// funcCollector reports values read at scrape time from functions the worker
// supplies.
type funcCollector struct {
	depth atomic.Pointer[func(context.Context) (map[string]float64, error)]
	stats atomic.Pointer[func() queue.Stats]
	conn  atomic.Pointer[func() bool]

	depthErrors atomic.Int64

	depthDesc, depthErrDesc, droppedDesc, startedDesc, resultsDesc,
	deadDesc, dupDesc, retriedDesc, requeuedDesc, connDesc *prometheus.Desc
}

func newFuncCollector() *funcCollector {
	return &funcCollector{
		depthDesc:    prometheus.NewDesc("fleet_queue_depth", "Jobs waiting in the queue (not yet delivered), by operation.", []string{"operation"}, nil),
		depthErrDesc: prometheus.NewDesc("fleet_queue_depth_errors_total", "Scrapes that could not read the queue depth.", nil, nil),
		droppedDesc:  prometheus.NewDesc("fleet_events_dropped_total", "Loop events the worker could not publish (buffer full or publish error).", nil, nil),
		startedDesc:  prometheus.NewDesc("fleet_worker_jobs_started_total", "Handler runs the worker began.", nil, nil),
		resultsDesc:  prometheus.NewDesc("fleet_worker_results_total", "Results the worker published, by job state.", []string{"state"}, nil),
		deadDesc:     prometheus.NewDesc("fleet_worker_dead_letters_total", "Requests the worker dead-lettered (poison, exhausted, by advisory).", nil, nil),
		dupDesc:      prometheus.NewDesc("fleet_worker_duplicates_total", "Deliveries acknowledged without running because the job had already ended.", nil, nil),
		retriedDesc:  prometheus.NewDesc("fleet_worker_retries_total", "Jobs handed back with a delay after a transient failure.", nil, nil),
		requeuedDesc: prometheus.NewDesc("fleet_worker_requeued_total", "Jobs handed back by a shutdown.", nil, nil),
		connDesc:     prometheus.NewDesc("fleet_nats_connected", "1 while the worker's NATS connection is up, else 0.", nil, nil),
	}
}

func (c *funcCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.depthDesc, c.depthErrDesc, c.droppedDesc, c.startedDesc, c.resultsDesc,
		c.deadDesc, c.dupDesc, c.retriedDesc, c.requeuedDesc, c.connDesc} {
		ch <- d
	}
}

func (c *funcCollector) Collect(ch chan<- prometheus.Metric) {
	if f := c.depth.Load(); f != nil && *f != nil {
		ctx, cancel := context.WithTimeout(context.Background(), DefaultScrapeTimeout)
		depth, err := (*f)(ctx)
		cancel()
		if err != nil {
			c.depthErrors.Add(1)
		} else {
			for op, n := range depth {
				ch <- prometheus.MustNewConstMetric(c.depthDesc, prometheus.GaugeValue, n, op)
			}
		}
		ch <- prometheus.MustNewConstMetric(c.depthErrDesc, prometheus.CounterValue, float64(c.depthErrors.Load()))
	}
	if f := c.stats.Load(); f != nil && *f != nil {
		st := (*f)()
		counter := func(d *prometheus.Desc, v int64, labels ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
		}
		counter(c.droppedDesc, st.EventsDropped)
		counter(c.startedDesc, st.Started)
		counter(c.resultsDesc, st.Succeeded, string(wire.StateSucceeded))
		counter(c.resultsDesc, st.Failed, string(wire.StateFailed))
		counter(c.resultsDesc, st.Canceled, string(wire.StateCanceled))
		counter(c.deadDesc, st.Dead)
		counter(c.dupDesc, st.Duplicates)
		counter(c.retriedDesc, st.Retried)
		counter(c.requeuedDesc, st.Requeued)
	}
	if f := c.conn.Load(); f != nil && *f != nil {
		up := 0.0
		if (*f)() {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(c.connDesc, prometheus.GaugeValue, up)
	}
}
