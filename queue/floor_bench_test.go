package queue

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// floorRun measures the protocol floor: the durable operations the fleet
// protocol requires per job and nothing else, written directly against
// nats.go with none of the worker's code, on the same streams (same
// configuration: ledger.EnsureStreams' file-stored FLEET_RUNS, FLEET_RESULTS and
// fleet_jobs), with the same request bytes and the same number of slots.
// Per job:
//
//  1. the request is published (asynchronously, like the fleet run);
//  2. a slot sends a pull request for one message and receives the job;
//  3. it writes the job's lease record (compare-and-set on the lease
//     subject's revision 0) and, at the same time, reads the client's
//     status record (a direct get: a cancel of a queued job);
//  4. once the lease is confirmed (its revision fences the result) it
//     publishes the result with the lease as its expected last subject
//     sequence (protocol 1.2);
//  5. once the result is confirmed it acknowledges the job (plain +ACK)
//     and pulls the next;
//  6. the client receives the result (a subscription on the results
//     subject), which is where the fleet run counts its jobs too.
//
// No events by default, no request decoding, no JSON encoding (the
// status and result payloads are prebuilt bytes of the fleet's sizes). Each
// slot has one subscription for all its replies (pull answers and PubAcks),
// a channel subscription: no goroutine hop beyond the connection's reader.
// FLEET_BENCH_FLOOR_CONNS=1 puts every slot on its own connection (default:
// one shared connection, like the worker).
//
// With events > 0 the slot also publishes that many events per job (plain
// publishes of the fleet's event size, headers and subject, which
// FLEET_RESULTS captures, before the result): the floor of the protocol
// including its per-turn events, a one-turn run's five.
//
// msgs are the server's messages in and out per job (benchEnv.serverMsgs),
// to compare with the fleet's: the same operations, one for one.
func floorRun(b *testing.B, n, slots, events int) (rate float64, cpu time.Duration, mem allocs, srvMsgs [2]float64) {
	e := newBenchEnv(b)
	defer e.close()
	ctx := context.Background()
	memory := os.Getenv("FLEET_BENCH_MEMORY") == "1"
	if _, err := ledger.EnsureStreams(ctx, e.js, ledger.StreamsConfig{Operations: []string{"lint"}, Memory: memory}); err != nil {
		b.Fatal(err)
	}
	msgs := make([]*nats.Msg, n)
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	for i := range msgs {
		msgs[i] = benchRequestMsg(b, fmt.Sprintf("f%s-%d", run, i))
	}
	perConn := os.Getenv("FLEET_BENCH_FLOOR_CONNS") == "1"
	shared, err := e.srv.Connect()
	if err != nil {
		b.Fatal(err)
	}
	defer shared.Close()
	var done, got atomic.Int64
	var failed atomic.Value
	finished := make(chan struct{})
	var endOnce sync.Once
	end := func() { endOnce.Do(func() { close(finished) }) }
	// The client receives every result, as the fleet run's client does
	// (a subscription on the results subject): the run ends when it has
	// them all.
	rsub, err := e.nc.Subscribe(wire.SubjectResultsPrefix+">", func(*nats.Msg) {
		if got.Add(1) == int64(n) {
			end()
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = rsub.Unsubscribe() }()
	_ = rsub.SetPendingLimits(-1, -1)
	if err := e.nc.Flush(); err != nil {
		b.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	pullBody := []byte(`{"batch":1,"expires":5000000000}`)
	pullSubj := "$JS.API.CONSUMER.MSG.NEXT." + wire.StreamRuns + ".lint"
	for range slots {
		nc := shared
		if perConn {
			if nc, err = e.srv.Connect(); err != nil {
				b.Fatal(err)
			}
			defer nc.Close()
		}
		inbox := nc.NewInbox()
		ch := make(chan *nats.Msg, 16)
		sub, err := nc.ChanSubscribe(inbox+".*", ch)
		if err != nil {
			b.Fatal(err)
		}
		defer func() { _ = sub.Unsubscribe() }()
		wg.Add(1)
		go func() {
			defer wg.Done()
			fail := func(err error) {
				failed.CompareAndSwap(nil, err)
				end()
			}
			// wait returns the next reply on the slot's inbox.
			wait := func() *nats.Msg {
				select {
				case m := <-ch:
					return m
				case <-stop:
					return nil
				}
			}
			pullReply, runReply, resReply, endReply := inbox+".p", inbox+".r", inbox+".s", inbox+".t"
			for {
				if err := nc.PublishRequest(pullSubj, pullReply, pullBody); err != nil {
					fail(err)
					return
				}
				var job *nats.Msg
				for job == nil {
					m := wait()
					if m == nil {
						return
					}
					if isJobMsg(m) { // a delivery keeps its own subject
						job = m
					} else if m.Subject == pullReply && m.Header.Get("Status") == "408" {
						if err := nc.PublishRequest(pullSubj, pullReply, pullBody); err != nil {
							fail(err)
							return
						}
					}
				}
				id := job.Header.Get(wire.HeaderMsgID)
				lease := &nats.Msg{Subject: wire.LeaseSubject(id), Reply: runReply, Data: floorStatus(id, "running"),
					Header: nats.Header{jetstream.ExpectedLastSubjSeqHeader: {"0"}}}
				if err := nc.PublishMsg(lease); err != nil {
					fail(err)
					return
				}
				// The client's record (a cancel of a queued job), read
				// while the lease is written.
				if err := nc.PublishRequest("$JS.API.DIRECT.GET.KV_"+wire.BucketJobs+".$KV."+wire.BucketJobs+"."+id, endReply, nil); err != nil {
					fail(err)
					return
				}
				var rev uint64
				leaseOK, kvOK := false, false
				for !leaseOK || !kvOK {
					m := wait()
					if m == nil {
						return
					}
					switch m.Subject {
					case runReply:
						seq, err := floorPubAck(m.Data)
						if err != nil {
							fail(fmt.Errorf("lease: %w", err))
							return
						}
						rev, leaseOK = seq, true
					case endReply:
						kvOK = true
					}
				}
				if events > 0 {
					h := nats.Header{wire.HeaderContentType: {"application/json"}, wire.HeaderProtocol: {"1"},
						wire.HeaderJobID: {id}, wire.HeaderAttempt: {"1"}}
					for k := range events {
						if err := nc.PublishMsg(&nats.Msg{Subject: wire.EventSubject(id), Data: floorEvent(id, k+1), Header: h}); err != nil {
							fail(err)
							return
						}
					}
				}
				srev := strconv.FormatUint(rev, 10)
				result := &nats.Msg{Subject: wire.ResultSubject(id), Reply: resReply, Data: floorResult(id),
					Header: nats.Header{wire.HeaderMsgID: {wire.ResultMsgID(id, rev)}, wire.HeaderContentType: {"application/json"},
						wire.HeaderProtocol: {"1"}, wire.HeaderJobID: {id}, wire.HeaderAttempt: {"1"},
						wire.HeaderExpectedLastSubjSeq: {srev}, wire.HeaderExpectedLastSubjSeqSubj: {wire.LeaseSubject(id)}}}
				if err := nc.PublishMsg(result); err != nil {
					fail(err)
					return
				}
				for resOK := false; !resOK; {
					m := wait()
					if m == nil {
						return
					}
					if m.Subject != resReply {
						continue
					}
					if _, err := floorPubAck(m.Data); err != nil {
						fail(fmt.Errorf("result: %w", err))
						return
					}
					resOK = true
				}
				if err := nc.Publish(job.Reply, []byte("+ACK")); err != nil {
					fail(err)
					return
				}
				done.Add(1)
			}
		}()
	}
	if err := shared.Flush(); err != nil {
		b.Fatal(err)
	}
	start, cpu0, mem0 := time.Now(), cpuTime(), allocsNow()
	in0, out0 := e.serverMsgs()
	publishAll(b, e.js, msgs)
	select {
	case <-finished:
	case <-time.After(20*time.Second + time.Duration(n)*time.Millisecond):
		b.Fatalf("floor: only %d of %d jobs done, %d results received", done.Load(), n, got.Load())
	}
	el := time.Since(start)
	cpu = cpuTime() - cpu0
	mem = allocsNow().minus(mem0)
	in1, out1 := e.serverMsgs()
	close(stop)
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatalf("floor: %v", err)
	}
	return float64(n) / el.Seconds(), cpu, mem, [2]float64{(in1 - in0) / float64(n), (out1 - out0) / float64(n)}
}

// floorStatus is a status record of the fleet's size and shape.
func floorStatus(id, state string) []byte {
	return fmt.Appendf(nil, `{"job_id":%q,"operation":"lint","state":%q,"worker":"bench","attempt":1,"seq":1,"updated_at":"2026-11-22T03:00:00.000000001Z"}`, id, state)
}

// floorEvent is an event of the fleet's typical size.
func floorEvent(id string, seq int) []byte {
	return fmt.Appendf(nil, `{"job_id":%q,"attempt":1,"kind":"tool_call","seq":%d,"turn":1,"time":"2026-11-22T03:00:00.000000001Z","tool":"submit_result","call_id":"call_1","arguments":{"status":"success","summary":"no-op"}}`, id, seq)
}

// floorResult is a no-op result of the fleet's size and shape.
func floorResult(id string) []byte {
	return fmt.Appendf(nil, `{"version":1,"job_id":%q,"operation":"lint","state":"succeeded","status":"success","workspace_id":"ws-%s","changed_files":[],"summary":"no-op","turns":1,"tool_calls":1,"usage":{"prompt_tokens":0,"completion_tokens":0},"diff":"--- a/a.py\n+++ b/a.py\n","worker":"bench","attempts":1,"timings":{"enqueued_at":"2026-11-22T03:00:00.000000001Z","started_at":"2026-11-22T03:00:00.000000001Z","finished_at":"2026-11-22T03:00:00.000000001Z","queued_ns":1,"run_ns":1,"model_ns":0,"tools_ns":0}}`, id, id)
}

// floorPubAck returns a PubAck's sequence, or the server's error.
func floorPubAck(data []byte) (uint64, error) {
	if bytes.Contains(data, []byte(`"error"`)) {
		return 0, fmt.Errorf("server: %s", data)
	}
	i := bytes.Index(data, []byte(`"seq":`))
	if i < 0 {
		return 0, fmt.Errorf("not a PubAck: %s", data)
	}
	var seq uint64
	for _, c := range data[i+6:] {
		if c < '0' || c > '9' {
			break
		}
		seq = seq*10 + uint64(c-'0')
	}
	return seq, nil
}

// BenchmarkProtocolFloor runs only the protocol floor (floorRun), for
// comparing its variants (FLEET_BENCH_FLOOR_CONNS, FLEET_BENCH_MEMORY,
// FLEET_BENCH_FLOOR_EVENTS=n events per job).
func BenchmarkProtocolFloor(b *testing.B) {
	ev, _ := strconv.Atoi(os.Getenv("FLEET_BENCH_FLOOR_EVENTS"))
	rate, cpu, mem, msgs := floorRun(b, b.N, benchSlots(), ev)
	b.ReportMetric(rate, "floor-jobs/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "floor-cpu-µs/job")
	b.ReportMetric(mem.perJob(b.N).bytes, "floor-B/job")
	b.ReportMetric(mem.perJob(b.N).count, "floor-allocs/job")
	b.ReportMetric(msgs[0], "floor-srv-in-msgs/job")
	b.ReportMetric(msgs[1], "floor-srv-out-msgs/job")
}
