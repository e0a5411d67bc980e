package ledger

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/queue/wire"
)

// The JetStream broker's WorkerIO: pull requests to the FLEET_RUNS
// consumers ($JS.API.CONSUMER.MSG.NEXT) answered on one subscription,
// events and cancels on core NATS.

// streams is the broker's streams (nil: none given).
func (j *JetStream) streams() *Streams { return j.st.Load() }

// Streams returns the broker's streams, with the consumers EnsureOperations
// added (nil when none were given).
func (j *JetStream) Streams() *Streams { return j.streams() }

// jsPull is a Pull on one subscription: request id i answers on
// <prefix>.<id>; a job carries its own subject and names its consumer in
// its ack reply subject ($JS.ACK.<stream>.<consumer>.<...>).
type jsPull struct {
	j      *JetStream
	h      PullHandler
	prefix string
	sub    *nats.Subscription
}

// OpenPulls implements WorkerIO.
func (j *JetStream) OpenPulls(h PullHandler) (Pull, error) {
	p := &jsPull{j: j, h: h, prefix: j.cfg.Conn.NewInbox()}
	sub, err := j.cfg.Conn.Subscribe(p.prefix+".>", p.onMsg)
	if err != nil {
		return nil, fmt.Errorf("ledger: subscribe pull inbox: %w", err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	p.sub = sub
	return p, nil
}

func (p *jsPull) onMsg(m *nats.Msg) {
	if strings.HasPrefix(m.Reply, "$JS.ACK.") {
		meta, err := m.Metadata()
		if err != nil {
			p.j.cfg.Logger.Error("job message without metadata", "reply", m.Reply, "err", err)
			_ = m.Term()
			return
		}
		consumer := ""
		if parts := strings.SplitN(m.Reply, ".", 5); len(parts) == 5 {
			consumer = parts[3]
		}
		p.h.Delivered(consumer, NewDelivery(m, meta))
		return
	}
	code := m.Header.Get("Status")
	if code == "100" || code == "" {
		return
	}
	if code != "404" && code != "408" {
		p.j.cfg.Logger.Warn("pull refused", "status", code, "description", m.Header.Get("Description"))
	}
	p.h.Ended(strings.TrimPrefix(m.Subject, p.prefix+"."), code)
}

// Request implements Pull.
func (p *jsPull) Request(consumer, id string, n int, wait bool, expiry time.Duration) error {
	var body []byte
	if wait {
		body = fmt.Appendf(nil, `{"batch":%d,"expires":%d}`, n, expiry.Nanoseconds())
	} else {
		body = fmt.Appendf(nil, `{"batch":%d,"no_wait":true}`, n)
	}
	return p.j.cfg.Conn.PublishRequest("$JS.API.CONSUMER.MSG.NEXT."+wire.StreamRuns+"."+consumer, p.prefix+"."+id, body)
}

// Close implements Pull: the subscription is drained.
func (p *jsPull) Close(ctx context.Context) {
	nc := p.j.cfg.Conn
	if !nc.IsConnected() {
		_ = p.sub.Unsubscribe()
		return
	}
	c := p.sub.StatusChanged(nats.SubscriptionClosed)
	if p.sub.Drain() != nil {
		return
	}
	select {
	case <-c:
	case <-ctx.Done():
	}
}

// PassBack implements WorkerIO: a plain Nak, or one delayed by last on
// the delivery before the consumer's last, confirmed by the server.
func (j *JetStream) PassBack(ctx context.Context, d *Delivery, last time.Duration) error {
	m, ok := msgOf(d)
	if !ok {
		return nil
	}
	body := []byte("-NAK")
	if st := j.streams(); st != nil && st.Config.MaxDeliver > 0 && d.Attempt >= st.Config.MaxDeliver-1 {
		body = fmt.Appendf(nil, `-NAK {"delay":%d}`, last.Nanoseconds())
	}
	nc := j.cfg.Conn
	if !nc.IsConnected() {
		return m.Nak()
	}
	if _, err := nc.RequestWithContext(ctx, m.Reply, body); err != nil {
		return errors.Join(err, m.Nak())
	}
	return nil
}

// PublishEvent implements WorkerIO: a plain publish, which FLEET_RESULTS
// captures (no PubAck per event; the result that follows on the same
// connection into the same stream is stored after it).
func (j *JetStream) PublishEvent(subject string, h map[string][]string, data []byte) error {
	return j.cfg.Conn.PublishMsg(&nats.Msg{Subject: subject, Header: h, Data: data})
}

// Buffered implements WorkerIO (the connection's unsent bytes).
func (j *JetStream) Buffered() int {
	n, err := j.cfg.Conn.Buffered()
	if err != nil {
		return 1 << 30
	}
	return n
}

// Cancels implements WorkerIO on agents.cancel.*.
func (j *JetStream) Cancels(fn func(jobID, reason string)) (func() error, error) {
	sub, err := j.cfg.Conn.Subscribe(wire.SubjectCancelPrefix+"*", func(m *nats.Msg) {
		reason := ""
		if len(m.Data) > 0 {
			var body wire.CancelRequest
			if err := wire.JSON.Unmarshal(m.Data, &body); err == nil {
				reason = wire.Clip(body.Reason)
			}
		}
		fn(strings.TrimPrefix(m.Subject, wire.SubjectCancelPrefix), reason)
	})
	if err != nil {
		return nil, fmt.Errorf("ledger: subscribe to cancels: %w", err)
	}
	return sub.Unsubscribe, nil
}

// EnsureOperations implements WorkerIO: the consumers of the operations
// the streams do not have yet (EnsureConsumers).
func (j *JetStream) EnsureOperations(ctx context.Context, ops []string) error {
	st := j.streams()
	if st == nil {
		return fmt.Errorf("%w: the JetStream broker has no streams", ErrInvalidConfig)
	}
	var added []string
	for _, op := range ops {
		if _, ok := st.Consumers[op]; !ok {
			added = append(added, op)
		}
	}
	if len(added) == 0 {
		return nil
	}
	cfg := st.Config
	cfg.Operations = added
	cons, err := EnsureConsumers(ctx, st.Runs, cfg)
	if err != nil {
		return err
	}
	next := *st
	next.Consumers = make(map[string]jetstream.Consumer, len(st.Consumers)+len(cons))
	maps.Copy(next.Consumers, st.Consumers)
	maps.Copy(next.Consumers, cons)
	next.Config.Operations = append(append([]string(nil), st.Config.Operations...), added...)
	j.st.Store(&next)
	return nil
}

// Flush implements WorkerIO.
func (j *JetStream) Flush(timeout time.Duration) error {
	nc := j.cfg.Conn
	if !nc.IsConnected() {
		return nil
	}
	if err := nc.FlushTimeout(timeout); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		return err
	}
	return nil
}
