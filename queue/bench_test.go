package queue

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// BenchmarkNoopJobs measures no-op jobs through the whole path — publish
// request, worker slot pulls it, loop.Runner with the scripted model that
// submits at once, events + result + status published to JetStream, ack;
// the client collects the results — against raw JetStream
// publish+consume+ack of the same payloads in the same process, and reports
// the ratio.
func BenchmarkNoopJobs(b *testing.B) {
	slots := benchSlots()
	n := b.N

	// Raw JetStream: the same request bytes published asynchronously to a
	// WorkQueue stream, then consumed and acknowledged with Ack() in the
	// same process. rawRate takes them one message per puller at a time
	// (S pullers with Messages(PullMaxMessages(1)), each on its own
	// connection: the fleet's one-job-per-slot rule, the ratio's
	// baseline); with batch, one Consume callback with the client's
	// default pull buffer (the JetStream ceiling; docs/PERFORMANCE.md).
	var rawCPU time.Duration
	rawRun := func(batch bool) float64 {
		e := newBenchEnv(b)
		defer e.close()
		ctx := context.Background()
		s, err := e.js.CreateStream(ctx, jetstream.StreamConfig{Name: "RAW", Subjects: []string{"raw.>"},
			Retention: jetstream.WorkQueuePolicy, Duplicates: ledger.DefaultDedupeWindow})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: "raw", AckPolicy: jetstream.AckExplicitPolicy,
			AckWait: time.Minute, FilterSubject: "raw.lint", MaxAckPending: -1}); err != nil {
			b.Fatal(err)
		}
		msgs := make([]*nats.Msg, n)
		for i := range msgs {
			msgs[i] = benchRequestMsg(b, fmt.Sprintf("raw-%d", i))
			msgs[i].Subject = "raw.lint"
		}
		var done atomic.Int64
		finished := make(chan struct{})
		count := func() {
			if done.Add(1) == int64(n) {
				close(finished)
			}
		}
		var wg sync.WaitGroup
		start, cpu0 := time.Now(), cpuTime()
		if batch {
			wnc, err := e.srv.Connect()
			if err != nil {
				b.Fatal(err)
			}
			defer wnc.Close()
			wjs, _ := jetstream.New(wnc)
			wc, _ := wjs.Consumer(ctx, "RAW", "raw")
			cc, err := wc.Consume(func(m jetstream.Msg) {
				_ = m.Ack()
				count()
			})
			if err != nil {
				b.Fatal(err)
			}
			defer cc.Stop()
		}
		for range slots {
			if batch {
				break
			}
			wnc, err := e.srv.Connect()
			if err != nil {
				b.Fatal(err)
			}
			wjs, _ := jetstream.New(wnc)
			wc, _ := wjs.Consumer(ctx, "RAW", "raw")
			it, err := wc.Messages(jetstream.PullMaxMessages(1))
			if err != nil {
				b.Fatal(err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer wnc.Close()
				for {
					m, err := it.Next()
					if err != nil {
						return
					}
					_ = m.Ack()
					count()
				}
			}()
			defer it.Stop()
		}
		publishAll(b, e.js, msgs)
		<-finished
		el := time.Since(start)
		if !batch {
			rawCPU = cpuTime() - cpu0
		}
		return float64(n) / el.Seconds()
	}
	// FLEET_BENCH_BASELINES=0 measures the fleet alone (for profiles).
	rawRate, rawBatchRate, floorRate, floorEvRate := 1.0, 1.0, 1.0, 1.0
	var floorCPU, floorEvCPU time.Duration
	var floorEvMem allocs
	var floorEvMsgs [2]float64
	if os.Getenv("FLEET_BENCH_BASELINES") != "0" {
		rawRate = rawRun(false)
		rawBatchRate = rawRun(true)
		// The protocol floor (floor_bench_test.go): the durable operations
		// a job needs, nothing else, on the same streams with the same
		// slots; then the same plus the five events of a one-turn run.
		floorRate, floorCPU, _, _ = floorRun(b, n, slots, 0)
		floorEvRate, floorEvCPU, floorEvMem, floorEvMsgs = floorRun(b, n, slots, 5)
	}

	e := newBenchEnv(b)
	workers := 1
	if v, err := strconv.Atoi(os.Getenv("FLEET_BENCH_WORKERS")); err == nil && v > 0 {
		workers = v
	}
	var ws []*Worker
	for range workers {
		ws = append(ws, e.startWorker(b, max(1, slots/workers)))
	}
	msgs := make([]*nats.Msg, n)
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	ops := benchOps()
	for i := range msgs {
		msgs[i] = benchRequestMsgOp(b, fmt.Sprintf("b%s-%d", run, i), ops[i%len(ops)])
		// FLEET_BENCH_EVENTS=header-none|header-finished: the requests
		// ask for fewer events (Fleet-Events), the worker is unchanged.
		if v, ok := strings.CutPrefix(os.Getenv("FLEET_BENCH_EVENTS"), "header-"); ok {
			msgs[i].Header.Set(wire.HeaderEvents, v)
		}
	}
	res := e.watchResults(b, n)
	defer res.stop()
	b.ResetTimer()
	start, cpu0, mem0 := time.Now(), cpuTime(), allocsNow()
	in0, out0 := e.serverMsgs()
	publishAll(b, e.js, msgs)
	res.wait(b)
	el := time.Since(start)
	fleetCPU := cpuTime() - cpu0
	fleetMem := allocsNow().minus(mem0).perJob(n)
	in1, out1 := e.serverMsgs()
	fleetIn, fleetOut := (in1-in0)/float64(n), (out1-out0)/float64(n)
	b.StopTimer()
	res.checkSucceeded(b)
	fleetRate := float64(n) / el.Seconds()
	var dropped, over int64
	for _, w := range ws {
		dropped += w.Stats().EventsDropped
		over += w.Stats().Overdelivered
	}
	b.ReportMetric(fleetRate, "jobs/s")
	b.ReportMetric(rawRate, "raw-msgs/s")
	b.ReportMetric(fleetRate/rawRate, "ratio")
	b.ReportMetric(rawBatchRate, "raw-batch-msgs/s")
	b.ReportMetric(float64(fleetCPU.Microseconds())/float64(n), "cpu-µs/job")
	b.ReportMetric(float64(rawCPU.Microseconds())/float64(n), "raw-cpu-µs/msg")
	b.ReportMetric(floorRate, "floor-jobs/s")
	b.ReportMetric(fleetRate/floorRate, "fleet÷floor")
	b.ReportMetric(float64(floorCPU.Microseconds())/float64(n), "floor-cpu-µs/job")
	b.ReportMetric(floorEvRate, "floor+ev-jobs/s")
	b.ReportMetric(fleetRate/floorEvRate, "fleet÷floor+ev")
	b.ReportMetric(float64(floorEvCPU.Microseconds())/float64(n), "floor+ev-cpu-µs/job")
	b.ReportMetric(fleetMem.bytes, "B/job")
	b.ReportMetric(fleetMem.count, "allocs/job")
	b.ReportMetric(floorEvMem.perJob(n).bytes, "floor+ev-B/job")
	b.ReportMetric(floorEvMem.perJob(n).count, "floor+ev-allocs/job")
	b.ReportMetric(fleetIn, "srv-in-msgs/job")
	b.ReportMetric(fleetOut, "srv-out-msgs/job")
	b.ReportMetric(floorEvMsgs[0], "floor+ev-srv-in-msgs/job")
	b.ReportMetric(floorEvMsgs[1], "floor+ev-srv-out-msgs/job")
	if n >= 1000 {
		b.Logf("n=%d slots=%d GOMAXPROCS=%d: fleet %.0f jobs/s (%.0f µs CPU per job, all parts in this process), raw JetStream %.0f msgs/s one at a time (%.0f µs CPU per message), ratio %.2f; raw with a pull buffer %.0f msgs/s; protocol floor %.0f jobs/s (%.0f µs CPU per job), fleet÷floor %.2f; floor with 5 events %.0f jobs/s (%.0f µs CPU per job), fleet÷that %.2f; heap allocations per job (whole process) fleet %.0f (%.0f B), floor with events %.0f (%.0f B) (operations %d, events dropped %d, over-delivered %d)",
			n, slots, runtime.GOMAXPROCS(0), fleetRate, float64(fleetCPU.Microseconds())/float64(n), rawRate,
			float64(rawCPU.Microseconds())/float64(n), fleetRate/rawRate, rawBatchRate,
			floorRate, float64(floorCPU.Microseconds())/float64(n), fleetRate/floorRate,
			floorEvRate, float64(floorEvCPU.Microseconds())/float64(n), fleetRate/floorEvRate,
			fleetMem.count, fleetMem.bytes, floorEvMem.perJob(n).count, floorEvMem.perJob(n).bytes, len(ops), dropped, over)
		comparePeers(b, fleetRate, 0, 0)
		if floorCPU > 0 {
			logCeilings(b, fleetCPU/time.Duration(n), floorCPU/time.Duration(n), floorEvCPU/time.Duration(n))
		}
	}
}

// publishAll publishes msgs asynchronously in windows and waits for every
// PubAck.
func publishAll(b *testing.B, js jetstream.JetStream, msgs []*nats.Msg) {
	const window = 1024
	for lo := 0; lo < len(msgs); lo += window {
		hi := min(lo+window, len(msgs))
		for _, m := range msgs[lo:hi] {
			if _, err := js.PublishMsgAsync(m); err != nil {
				b.Fatal(err)
			}
		}
		select {
		case <-js.PublishAsyncComplete():
		case <-time.After(30 * time.Second):
			b.Fatal("publish acks did not arrive")
		}
	}
}

// BenchmarkDispatchLatency measures one job at a time: from the client's
// publish to the result's arrival, through the whole path with the no-op
// loop; p50 and p99 are reported in microseconds, next to a raw JetStream
// round trip (publish, pull one, publish a reply on core NATS, ack) measured
// the same way.
func BenchmarkDispatchLatency(b *testing.B) {
	n := b.N
	raw := func() []time.Duration {
		e := newBenchEnv(b)
		defer e.close()
		ctx := context.Background()
		s, err := e.js.CreateStream(ctx, jetstream.StreamConfig{Name: "RAW", Subjects: []string{"raw.>"},
			Retention: jetstream.WorkQueuePolicy})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: "raw", AckPolicy: jetstream.AckExplicitPolicy,
			FilterSubject: "raw.lint"}); err != nil {
			b.Fatal(err)
		}
		wnc, err := e.srv.Connect()
		if err != nil {
			b.Fatal(err)
		}
		defer wnc.Close()
		// One puller, one message per pull request, as a fleet slot
		// pulls (a hand-written loop: nats.go's Messages iterator with
		// PullMaxMessages(1) now and then left a message waiting for
		// seconds under load).
		inbox := wnc.NewInbox()
		pulls := make(chan *nats.Msg, 8)
		psub, err := wnc.ChanSubscribe(inbox, pulls)
		if err != nil {
			b.Fatal(err)
		}
		defer func() { _ = psub.Unsubscribe() }()
		stop := make(chan struct{})
		defer close(stop)
		pullBody := []byte(`{"batch":1,"expires":5000000000}`)
		go func() {
			for {
				if wnc.PublishRequest("$JS.API.CONSUMER.MSG.NEXT.RAW.raw", inbox, pullBody) != nil {
					return
				}
				for answered := false; !answered; {
					select {
					case m := <-pulls:
						if isJobMsg(m) {
							_ = wnc.Publish("rawres."+m.Header.Get(wire.HeaderMsgID), nil)
							_ = m.Ack()
						}
						answered = isJobMsg(m) || m.Header.Get("Status") == "408" || m.Header.Get("Status") == "404"
					case <-stop:
						return
					}
				}
			}
		}()
		sub, err := e.nc.SubscribeSync("rawres.>")
		if err != nil {
			b.Fatal(err)
		}
		defer func() { _ = sub.Unsubscribe() }()
		if err := e.nc.Flush(); err != nil { // the subscription exists before the first reply
			b.Fatal(err)
		}
		lat := make([]time.Duration, 0, n)
		for i := range n {
			m := benchRequestMsg(b, fmt.Sprintf("raw-%d", i))
			m.Subject = "raw.lint"
			t0 := time.Now()
			if _, err := e.js.PublishMsg(ctx, m); err != nil {
				b.Fatal(err)
			}
			if _, err := sub.NextMsg(10 * time.Second); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(t0))
		}
		return lat
	}()

	e := newBenchEnv(b)
	e.startWorker(b, 2)
	sub, err := e.nc.SubscribeSync(wire.SubjectResultsPrefix + ">")
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := e.nc.Flush(); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	lat := make([]time.Duration, 0, n)
	type stamp struct {
		t0, t1 time.Time
		res    []byte
	}
	stamps := make([]stamp, 0, n)
	b.ResetTimer()
	for i := range n {
		m := benchRequestMsg(b, fmt.Sprintf("l%s-%d", run, i))
		t0 := time.Now()
		if _, err := e.js.PublishMsg(ctx, m); err != nil {
			b.Fatal(err)
		}
		rm, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		lat = append(lat, t1.Sub(t0))
		stamps = append(stamps, stamp{t0: t0, t1: t1, res: rm.Data})
	}
	b.StopTimer()
	p := func(l []time.Duration, q float64) float64 {
		s := slices.Clone(l)
		slices.Sort(s)
		return float64(s[min(len(s)-1, int(float64(len(s))*q))].Microseconds())
	}
	// Where the time goes, from the result's own timings (wall clock, same
	// process): pickup = publish to the slot's start (the request's store
	// and delivery), run = start to the end of the run (decoding, the
	// claim's status write, the loop), out = end of the run to the
	// result's arrival (events flushed, result published and routed).
	var pickup, runT, out []time.Duration
	for _, st := range stamps {
		r, err := wire.DecodeAgentResult(st.res, wire.ContentTypeJSON)
		if err != nil {
			b.Fatal(err)
		}
		pickup = append(pickup, r.Timings.StartedAt.Sub(st.t0))
		runT = append(runT, r.Timings.FinishedAt.Sub(r.Timings.StartedAt))
		out = append(out, st.t1.Sub(r.Timings.FinishedAt))
	}
	b.ReportMetric(p(lat, 0.50), "p50-µs")
	b.ReportMetric(p(lat, 0.99), "p99-µs")
	b.ReportMetric(p(raw, 0.50), "raw-p50-µs")
	b.ReportMetric(p(raw, 0.99), "raw-p99-µs")
	if n >= 100 {
		b.Logf("n=%d: whole p50 %.0f µs p99 %.0f µs = pickup p50 %.0f p99 %.0f + run (decode, claim, loop) p50 %.0f p99 %.0f + out (events, result) p50 %.0f p99 %.0f; raw round trip p50 %.0f p99 %.0f",
			n, p(lat, 0.5), p(lat, 0.99), p(pickup, 0.5), p(pickup, 0.99), p(runT, 0.5), p(runT, 0.99),
			p(out, 0.5), p(out, 0.99), p(raw, 0.5), p(raw, 0.99))
		comparePeers(b, 0, time.Duration(p(lat, 0.5)*1e3), time.Duration(p(lat, 0.99)*1e3))
	}
}
