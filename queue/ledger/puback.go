package ledger

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/agentfleet/fleet/queue/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// errPubAckTimeout: the server did not confirm a write within
// Config.PublishTimeout (a lost stream leader, a reconnect).
var errPubAckTimeout = errors.New("ledger: no PubAck within the publish timeout")

// pubAcks publishes one caller's JetStream writes on the hot path (the
// lease, the result) with reply subjects of its own and receives their PubAcks on a channel subscription: no
// shared reply-token map and no hop through the client's PubAck callback
// goroutine, which jetstream's PublishMsgAsync costs per write. One goroutine
// at a time uses it (the ledger keeps a free list). A PubAck that arrives after its wait gave up is
// recognized by its number and ignored.
type pubAcks struct {
	nc      *nats.Conn
	prefix  string // "<inbox>."
	sub     *nats.Subscription
	ch      chan *nats.Msg
	next    uint64
	reply   []byte // nextReply's buffer
	timer   *time.Timer
	timeout time.Duration
}

// pubAck is the server's answer to one write.
type pubAck struct {
	seq       uint64
	duplicate bool
	err       error
}

func newPubAcks(nc *nats.Conn, timeout time.Duration) (*pubAcks, error) {
	a := &pubAcks{nc: nc, prefix: nc.NewInbox() + ".", ch: make(chan *nats.Msg, 64), timeout: timeout}
	sub, err := nc.ChanSubscribe(a.prefix+"*", a.ch)
	if err != nil {
		return nil, err
	}
	a.sub = sub
	return a, nil
}

func (a *pubAcks) close() {
	if a != nil && a.sub != nil {
		_ = a.sub.Unsubscribe()
	}
}

// publish sends m (its Reply is set) and returns the number to wait for.
func (a *pubAcks) publish(m *nats.Msg) (uint64, error) {
	m.Reply = a.nextReply()
	if err := a.nc.PublishMsg(m); err != nil {
		return 0, err
	}
	return a.next, nil
}

// nextReply numbers the next write and returns its reply subject (built
// in a reused buffer: one allocation, the string).
func (a *pubAcks) nextReply() string {
	a.next++
	a.reply = strconv.AppendUint(append(a.reply[:0], a.prefix...), a.next, 10)
	return string(a.reply)
}

// request sends a request (a direct get) whose answer comes back on the
// same subscription, and returns the number to wait for.
func (a *pubAcks) request(subject string, data []byte) (uint64, error) {
	if err := a.nc.PublishRequest(subject, a.nextReply(), data); err != nil {
		return 0, err
	}
	return a.next, nil
}

// wait returns the answers to writes x and y (0 = none) once both have
// arrived, or errPubAckTimeout for those that did not within the timeout.
func (a *pubAcks) wait(x, y uint64) (ax, ay pubAck) {
	mx, my := a.waitMsgs(x, y)
	if x != 0 {
		ax = answer(mx)
	}
	if y != 0 {
		ay = answer(my)
	}
	return ax, ay
}

func answer(m *nats.Msg) pubAck {
	if m == nil {
		return pubAck{err: errPubAckTimeout}
	}
	return parsePubAck(m)
}

// waitMsgs returns the raw answers to x and y (0 = none); nil for one that
// did not arrive within the timeout.
func (a *pubAcks) waitMsgs(x, y uint64) (mx, my *nats.Msg) {
	gotX, gotY := x == 0, y == 0
	if gotX && gotY {
		return nil, nil
	}
	if a.timer == nil {
		a.timer = time.NewTimer(a.timeout)
	} else {
		a.timer.Reset(a.timeout)
	}
	defer a.timer.Stop()
	for !gotX || !gotY {
		select {
		case m := <-a.ch:
			n, err := strconv.ParseUint(m.Subject[min(len(a.prefix), len(m.Subject)):], 10, 64)
			switch {
			case err != nil:
			case n == x && !gotX:
				mx, gotX = m, true
			case n == y && !gotY:
				my, gotY = m, true
			}
		case <-a.timer.C:
			return mx, my
		}
	}
	return mx, my
}

// parsePubAck reads a PubAck: {"stream":"S","seq":N[,"duplicate":true]},
// or {"error":{"code":..,"err_code":..,"description":..}}, or a no
// responders status (no stream captures the subject).
func parsePubAck(m *nats.Msg) pubAck {
	d := m.Data
	if len(d) == 0 {
		if m.Header.Get("Status") == "503" {
			return pubAck{err: jetstream.ErrNoStreamResponse}
		}
		return pubAck{err: errors.New("ledger: empty PubAck")}
	}
	if !bytes.Contains(d, []byte(`"error"`)) {
		if i := bytes.Index(d, []byte(`"seq":`)); i >= 0 {
			var seq uint64
			for _, c := range d[i+len(`"seq":`):] {
				if c < '0' || c > '9' {
					break
				}
				seq = seq*10 + uint64(c-'0')
			}
			return pubAck{seq: seq, duplicate: bytes.Contains(d, []byte(`"duplicate":true`))}
		}
	}
	var r struct {
		Error     *jetstream.APIError `json:"error"`
		Seq       uint64              `json:"seq"`
		Duplicate bool                `json:"duplicate"`
	}
	if err := json.Unmarshal(d, &r); err != nil {
		return pubAck{err: errors.New("ledger: unreadable PubAck: " + wire.Clip(string(d)))}
	}
	if r.Error != nil {
		return pubAck{err: r.Error}
	}
	return pubAck{seq: r.Seq, duplicate: r.Duplicate}
}
