package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// asynqPeer measures github.com/hibiken/asynq on a Redis server.
//
// Throughput: an asynq.Server with Concurrency = the slots runs a no-op
// handler; the producer enqueues every task with Client.Enqueue from as many
// goroutines as there are slots (asynq has no batch enqueue; each Enqueue is
// one Redis script call) and the clock stops when the producer has seen
// every task finished: the handler ran n times and the queue's processed
// counter, which asynq bumps in the same script that removes a finished
// task, reached n.
//
// Latency: one task at a time, from Enqueue to the moment the producer sees
// the task gone from Redis (Inspector.GetTaskInfo answers ErrTaskNotFound:
// the handler returned and asynq removed the task); the producer starts
// polling for that when the handler signals that it ran, so the polls do not
// load Redis while the task waits to be picked up.
type asynqPeer struct {
	srv   *server
	check time.Duration // asynq.Config.TaskCheckInterval
}

const asynqQueue = "default"

func (p *asynqPeer) redisOpt() asynq.RedisClientOpt {
	return asynq.RedisClientOpt{Addr: p.srv.addr}
}

// reset empties Redis between runs.
func (p *asynqPeer) reset(ctx context.Context) error {
	rdb := redis.NewClient(&redis.Options{Addr: p.srv.addr})
	defer rdb.Close()
	return rdb.FlushAll(ctx).Err()
}

// asynqRun is an asynq server working the queue with a handler, and the
// producer's client and inspector.
type asynqRun struct {
	srv    *asynq.Server
	client *asynq.Client
	insp   *asynq.Inspector
}

// start empties Redis and runs an asynq server with concurrency workers
// calling handler with each task's sequence number.
func (p *asynqPeer) start(ctx context.Context, concurrency int, handler func(seq uint64)) (*asynqRun, error) {
	if err := p.reset(ctx); err != nil {
		return nil, err
	}
	srv := asynq.NewServer(p.redisOpt(), asynq.Config{
		Concurrency:       concurrency,
		TaskCheckInterval: p.check,
		Queues:            map[string]int{asynqQueue: 1},
		LogLevel:          asynq.WarnLevel,
	})
	mux := asynq.NewServeMux()
	mux.HandleFunc("noop", func(_ context.Context, t *asynq.Task) error {
		handler(taskSeq(t.Payload()))
		return nil
	})
	if err := srv.Start(mux); err != nil {
		return nil, err
	}
	return &asynqRun{srv: srv, client: asynq.NewClient(p.redisOpt()), insp: asynq.NewInspector(p.redisOpt())}, nil
}

func (r *asynqRun) close() {
	r.srv.Shutdown()
	_ = r.client.Close()
	_ = r.insp.Close()
}

// noopPayload is a small request-sized payload carrying the job's sequence
// number in its first 8 bytes.
func noopPayload(seq uint64) []byte {
	b := make([]byte, 8, 160)
	binary.BigEndian.PutUint64(b, seq)
	return append(b, `{"operation":"lint","files":{"a.py":"x = 1\n"},"options":{"max_turns":1}}`...)
}

func taskSeq(b []byte) uint64 {
	if len(b) < 8 {
		return ^uint64(0)
	}
	return binary.BigEndian.Uint64(b)
}

func (p *asynqPeer) throughput(ctx context.Context, n, slots int) (tputResult, error) {
	seen := newSeenSet(n)
	handled := make(chan struct{})
	var count atomic.Int64
	run, err := p.start(ctx, slots, func(seq uint64) {
		seen.mark(seq)
		if count.Add(1) == int64(n) {
			close(handled)
		}
	})
	if err != nil {
		return tputResult{}, err
	}
	defer run.close()
	client, insp := run.client, run.insp
	tasks := make([]*asynq.Task, n)
	for i := range tasks {
		tasks[i] = asynq.NewTask("noop", noopPayload(uint64(i)))
	}

	meter := cpuMeter{serverPID: p.srv.pid()}
	meter.start()
	t0 := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, slots)
	for range slots {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				if _, err := client.EnqueueContext(ctx, tasks[i], asynq.Queue(asynqQueue)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	enqueued := time.Since(t0)
	select {
	case err := <-errs:
		return tputResult{}, fmt.Errorf("asynq enqueue: %w", err)
	default:
	}
	if err := waitDone(ctx, handled, n, &count); err != nil {
		return tputResult{}, err
	}
	// The handler returned n times; the run ends when asynq has recorded
	// all n as processed (the task's removal and the counter are one
	// script).
	for {
		qi, err := insp.GetQueueInfo(asynqQueue)
		if err != nil {
			return tputResult{}, fmt.Errorf("asynq queue info: %w", err)
		}
		if qi.FailedTotal > 0 {
			return tputResult{}, fmt.Errorf("asynq: %d tasks failed", qi.FailedTotal)
		}
		if qi.ProcessedTotal >= n && qi.Size == 0 {
			break
		}
		if err := sleepCtx(ctx, time.Millisecond); err != nil {
			return tputResult{}, err
		}
	}
	elapsed := time.Since(t0)
	meter.stop()
	if err := seen.complete(); err != nil {
		return tputResult{}, fmt.Errorf("asynq: %w", err)
	}
	return tputResult{n: n, elapsed: elapsed, enqueue: enqueued, cpu: meter}, nil
}

func (p *asynqPeer) latency(ctx context.Context, n, slots int) (latResult, error) {
	started := make(chan uint64, 1)
	run, err := p.start(ctx, slots, func(seq uint64) { started <- seq })
	if err != nil {
		return latResult{}, err
	}
	defer run.close()
	client, insp := run.client, run.insp

	var r latResult
	for i := range n {
		task := asynq.NewTask("noop", noopPayload(uint64(i)))
		t0 := time.Now()
		info, err := client.EnqueueContext(ctx, task, asynq.Queue(asynqQueue))
		if err != nil {
			return latResult{}, fmt.Errorf("asynq enqueue: %w", err)
		}
		if err := waitSeq(ctx, started, uint64(i)); err != nil {
			return latResult{}, fmt.Errorf("asynq: %w", err)
		}
		th := time.Now()
		for {
			_, err := insp.GetTaskInfo(asynqQueue, info.ID)
			if errors.Is(err, asynq.ErrTaskNotFound) {
				break
			}
			if err != nil {
				return latResult{}, fmt.Errorf("asynq task info: %w", err)
			}
			if ctx.Err() != nil {
				return latResult{}, ctx.Err()
			}
		}
		r.add(th.Sub(t0), time.Since(t0))
	}
	return r, r.measureIdle(ctx, p.srv.pid())
}
