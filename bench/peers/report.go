package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"text/tabwriter"
	"time"
)

// measureFunc runs n jobs with slots workers.
type measureFunc[R any] func(ctx context.Context, n, slots int) (R, error)

// peerRun is one row of the table: a peer with its settings and its
// figures from every repeat.
type peerRun struct {
	Key, Label       string
	Library, Server  string
	Setup            string
	Durability       string
	LatencyPath      string
	BatchLatencyPath string
	Skipped          string

	tput     measureFunc[tputResult]
	lat      measureFunc[latResult]
	batchLat measureFunc[latResult] // nil unless the peer has a second, batched completion path

	tputs     []tputResult
	lats      []latResult
	batchLats []latResult
}

// measure runs one repeat: the throughput run, then the latency runs.
func (p *peerRun) measure(ctx context.Context, cfg config, rep int) error {
	t, err := p.tput(ctx, cfg.Jobs, cfg.Slots)
	if err != nil {
		return fmt.Errorf("throughput: %w", err)
	}
	p.tputs = append(p.tputs, t)
	self, srv := t.cpuPerJob()
	fmt.Printf("peers: [%d/%d] %s: %d jobs in %s = %s jobs/s (enqueue %s), CPU per job %s bench + %s server; load %s\n",
		rep, cfg.Repeats, p.Label, t.n, fmtD(t.elapsed), groupDigits(t.rate()), fmtD(t.enqueue),
		fmtD(self), fmtD(srv), loadavg())
	l, err := p.lat(ctx, cfg.LatencyJobs, cfg.LatencySlots)
	if err != nil {
		return fmt.Errorf("latency: %w", err)
	}
	p.lats = append(p.lats, l)
	fmt.Printf("peers: [%d/%d] %s: %s; idle CPU %s; load %s\n", rep, cfg.Repeats, p.Label, l.summary(),
		fmtIdle(l.idle), loadavg())
	if p.batchLat == nil {
		return nil
	}
	b, err := p.batchLat(ctx, cfg.BatchLatency, cfg.LatencySlots)
	if err != nil {
		return fmt.Errorf("batch-completer latency: %w", err)
	}
	p.batchLats = append(p.batchLats, b)
	fmt.Printf("peers: [%d/%d] %s, batch completer: %s; load %s\n", rep, cfg.Repeats, p.Label, b.summary(), loadavg())
	return nil
}

// summary prints a latency run's quantiles.
func (l latResult) summary() string {
	return fmt.Sprintf("%d single jobs: done p50 %s p99 %s (handler started p50 %s p99 %s)", len(l.done),
		fmtD(quantile(l.done, .5)), fmtD(quantile(l.done, .99)), fmtD(quantile(l.pickup, .5)), fmtD(quantile(l.pickup, .99)))
}

// fmtIdle prints CPU time per second of wall time as a share of one core.
func fmtIdle(d time.Duration) string {
	return fmt.Sprintf("%.1f%% of a core", 100*d.Seconds())
}

func idleSpread(ls []latResult) spread {
	var xs []float64
	for _, l := range ls {
		xs = append(xs, float64(l.idle))
	}
	return spreadOf(xs)
}

// latSpreads are the per-repeat p50 and p99 of one kind of latency sample.
func latSpreads(ls []latResult, pick func(latResult) []time.Duration) (p50, p99 spread) {
	var a, b []float64
	for _, l := range ls {
		a = append(a, float64(quantile(pick(l), .5)))
		b = append(b, float64(quantile(pick(l), .99)))
	}
	return spreadOf(a), spreadOf(b)
}

func done(l latResult) []time.Duration   { return l.done }
func pickup(l latResult) []time.Duration { return l.pickup }

// report is the whole run, printed as a table and written as JSON.
type report struct {
	Config                config
	CPUs                  int
	LoadBefore, LoadAfter string
	Started               time.Time
	Peers                 []*peerRun
}

// print writes the compact table: one row per peer, medians over the
// repeats with their ranges.
func (r *report) print(w io.Writer) {
	fmt.Fprintf(w, "peers: %d repeats; figures are the median (min–max) over the repeats\n", r.Config.Repeats)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "peer\tjobs/s\tCPU/job bench+server\tsingle job p50\tp99\tidle CPU")
	for _, p := range r.Peers {
		if p.Skipped != "" {
			fmt.Fprintf(tw, "%s\tskipped\t\t\t\t\n", p.Label)
			continue
		}
		var rates, cpu []float64
		for _, t := range p.tputs {
			rates = append(rates, t.rate())
			s, v := t.cpuPerJob()
			cpu = append(cpu, float64(s+v))
		}
		p50, p99 := latSpreads(p.lats, done)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", p.Label, spreadOf(rates).fmtRate(),
			fmtD(time.Duration(spreadOf(cpu).Median)), p50.fmtDur(), p99.fmtDur(),
			fmtIdle(time.Duration(idleSpread(p.lats).Median)))
		if len(p.batchLats) > 0 {
			b50, b99 := latSpreads(p.batchLats, done)
			fmt.Fprintf(tw, "  (batch completer)\t\t\t%s\t%s\t\n", b50.fmtDur(), b99.fmtDur())
		}
	}
	_ = tw.Flush()
	for _, p := range r.Peers {
		if p.Skipped == "" {
			fmt.Fprintf(w, "peers: %s single job = %s\n", p.Label, p.LatencyPath)
			if p.BatchLatencyPath != "" {
				fmt.Fprintf(w, "peers: %s (batch completer) = %s\n", p.Label, p.BatchLatencyPath)
			}
		}
	}
}

// peerJSON is one peer's entry in the JSON file. Durations are in
// nanoseconds; a figure without a suffix is the median over the repeats.
type peerJSON struct {
	Label         string  `json:"label"`
	Skipped       string  `json:"skipped,omitempty"`
	Library       string  `json:"library,omitempty"`
	Server        string  `json:"server,omitempty"`
	Setup         string  `json:"setup,omitempty"`
	Durability    string  `json:"durability,omitempty"`
	N             int     `json:"n,omitempty"`
	Concurrency   int     `json:"concurrency,omitempty"`
	Repeats       int     `json:"repeats,omitempty"`
	JobsPerS      float64 `json:"jobs_per_s,omitempty"`
	JobsPerSMin   float64 `json:"jobs_per_s_min,omitempty"`
	JobsPerSMax   float64 `json:"jobs_per_s_max,omitempty"`
	EnqueuePerS   float64 `json:"enqueue_per_s,omitempty"`
	CPUNsPerJob   float64 `json:"cpu_ns_per_job,omitempty"`
	SrvCPUNsPer   float64 `json:"server_cpu_ns_per_job,omitempty"`
	LatencyN      int     `json:"latency_n,omitempty"`
	LatencyConc   int     `json:"latency_concurrency,omitempty"`
	LatencyPath   string  `json:"latency_path,omitempty"`
	P50           float64 `json:"p50_ns,omitempty"`
	P50Min        float64 `json:"p50_ns_min,omitempty"`
	P50Max        float64 `json:"p50_ns_max,omitempty"`
	P99           float64 `json:"p99_ns,omitempty"`
	P99Min        float64 `json:"p99_ns_min,omitempty"`
	P99Max        float64 `json:"p99_ns_max,omitempty"`
	IdleCPUPct    float64 `json:"idle_cpu_pct,omitempty"`
	PickupP50     float64 `json:"pickup_p50_ns,omitempty"`
	PickupP99     float64 `json:"pickup_p99_ns,omitempty"`
	BatchPath     string  `json:"batch_completer_latency_path,omitempty"`
	BatchN        int     `json:"batch_completer_n,omitempty"`
	BatchP50      float64 `json:"batch_completer_p50_ns,omitempty"`
	BatchP99      float64 `json:"batch_completer_p99_ns,omitempty"`
	BatchPickup50 float64 `json:"batch_completer_pickup_p50_ns,omitempty"`
}

func (p *peerRun) json(cfg config) peerJSON {
	j := peerJSON{Label: p.Label, Skipped: p.Skipped, Library: p.Library, Server: p.Server, Setup: p.Setup,
		Durability: p.Durability}
	if p.Skipped != "" || len(p.tputs) == 0 {
		return j
	}
	var rates, enq, cpu, srv []float64
	for _, t := range p.tputs {
		rates = append(rates, t.rate())
		enq = append(enq, float64(t.n)/t.enqueue.Seconds())
		s, v := t.cpuPerJob()
		cpu, srv = append(cpu, float64(s)), append(srv, float64(v))
	}
	rs := spreadOf(rates)
	j.N, j.Concurrency, j.Repeats = cfg.Jobs, cfg.Slots, len(p.tputs)
	j.JobsPerS, j.JobsPerSMin, j.JobsPerSMax = rs.Median, rs.Min, rs.Max
	j.EnqueuePerS, j.CPUNsPerJob, j.SrvCPUNsPer = spreadOf(enq).Median, spreadOf(cpu).Median, spreadOf(srv).Median
	p50, p99 := latSpreads(p.lats, done)
	pk50, pk99 := latSpreads(p.lats, pickup)
	j.LatencyN, j.LatencyConc, j.LatencyPath = cfg.LatencyJobs, cfg.LatencySlots, p.LatencyPath
	j.P50, j.P50Min, j.P50Max = p50.Median, p50.Min, p50.Max
	j.P99, j.P99Min, j.P99Max = p99.Median, p99.Min, p99.Max
	j.PickupP50, j.PickupP99 = pk50.Median, pk99.Median
	j.IdleCPUPct = 100 * time.Duration(idleSpread(p.lats).Median).Seconds()
	if len(p.batchLats) > 0 {
		b50, b99 := latSpreads(p.batchLats, done)
		bp50, _ := latSpreads(p.batchLats, pickup)
		j.BatchPath, j.BatchN = p.BatchLatencyPath, cfg.BatchLatency
		j.BatchP50, j.BatchP99, j.BatchPickup50 = b50.Median, b99.Median, bp50.Median
	}
	return j
}

// rounded rounds rates to 0.1 job/s and durations to whole nanoseconds.
func (j peerJSON) rounded() peerJSON {
	r1 := func(x *float64) { *x = math.Round(*x*10) / 10 }
	for _, x := range []*float64{&j.JobsPerS, &j.JobsPerSMin, &j.JobsPerSMax, &j.EnqueuePerS, &j.IdleCPUPct} {
		r1(x)
	}
	for _, x := range []*float64{&j.CPUNsPerJob, &j.SrvCPUNsPer, &j.P50, &j.P50Min, &j.P50Max, &j.P99, &j.P99Min,
		&j.P99Max, &j.PickupP50, &j.PickupP99, &j.BatchP50, &j.BatchP99, &j.BatchPickup50} {
		*x = math.Round(*x)
	}
	return j
}

// peersFile is the JSON file's content.
type peersFile struct {
	Generated  time.Time           `json:"generated"`
	CPUs       int                 `json:"cpus"`
	LoadBefore string              `json:"load_before"`
	LoadAfter  string              `json:"load_after"`
	Peers      map[string]peerJSON `json:"peers"`
}

// writeJSON writes the figures to path (its directory is created).
func (r *report) writeJSON(path string) error {
	out := peersFile{Generated: r.Started.UTC(), CPUs: r.CPUs, LoadBefore: r.LoadBefore, LoadAfter: r.LoadAfter,
		Peers: map[string]peerJSON{}}
	for _, p := range r.Peers {
		out.Peers[p.Key] = p.json(r.Config)
	}
	for k, p := range out.Peers {
		out.Peers[k] = p.rounded()
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// libVersion is the version of module path linked into this binary.
func libVersion(path string) string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == path {
				return path + " " + d.Version
			}
		}
	}
	return path
}
