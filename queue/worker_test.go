package queue

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentfleet/fleet/queue/ledger"
)

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	nc := &nats.Conn{}
	np := func(int) (Handler, error) { return nil, nil }
	cases := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no conn", Config{Operations: []string{"lint"}, NewHandler: np}, "Conn"},
		{"no ops", Config{Conn: nc, NewHandler: np}, "Operations"},
		{"no handler", Config{Conn: nc, Operations: []string{"lint"}}, "NewHandler"},
		{"bad op", Config{Conn: nc, Operations: []string{"Lint.x"}, NewHandler: np}, "operation"},
		{"dup op", Config{Conn: nc, Operations: []string{"a", "a"}, NewHandler: np}, "twice"},
		{"heartbeat too slow", Config{Conn: nc, Operations: []string{"a"}, NewHandler: np, Heartbeat: time.Minute,
			Streams: ledger.StreamsConfig{AckWait: time.Second}}, "Heartbeat"},
		{"backoff too long", Config{Conn: nc, Operations: []string{"a"}, NewHandler: np,
			Streams: ledger.StreamsConfig{MaxDeliver: 1, BackOff: []time.Duration{time.Second, time.Second}}}, "BackOff"},
		{"negative slots", Config{Conn: nc, Operations: []string{"a"}, NewHandler: np, Slots: -1}, "Slots"},
		{"unserved stream op", Config{Conn: nc, Operations: []string{"a"}, NewHandler: np,
			Streams: ledger.StreamsConfig{Operations: []string{"b"}}}, "not in Streams.Operations"},
	}
	for _, c := range cases {
		_, err := NewWorker(c.cfg)
		if !errors.Is(err, ledger.ErrInvalidConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}
