package wire_test

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentfleet/fleet/config"
	"github.com/agentfleet/fleet/queue"
	"github.com/agentfleet/fleet/queue/ledger"
)

// phrase writes a duration the way docs/PROTOCOL.md does.
func phrase(d time.Duration) string {
	switch {
	case d%(24*time.Hour) == 0 && d >= 30*24*time.Hour:
		return strconv.Itoa(int(d/(24*time.Hour))) + " days"
	case d%time.Hour == 0:
		return strconv.Itoa(int(d/time.Hour)) + " h"
	case d%time.Minute == 0:
		return strconv.Itoa(int(d/time.Minute)) + " min"
	}
	return strconv.Itoa(int(d/time.Second)) + " s"
}

// TestProtocolDocDefaults keeps the defaults docs/PROTOCOL.md states equal
// to the code's: the worker binary's configuration and the library's own.
func TestProtocolDocDefaults(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../docs/PROTOCOL.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.Join(strings.Fields(string(b)), " ")
	if config.DefaultResultsMaxAge != ledger.DefaultResultsMaxAge || config.DefaultDLQMaxAge != ledger.DefaultDLQMaxAge ||
		config.DefaultUnservedAfter != queue.DefaultUnservedAfter {
		t.Errorf("config and library defaults differ: results %s/%s, dlq %s/%s, unserved %s/%s",
			config.DefaultResultsMaxAge, ledger.DefaultResultsMaxAge, config.DefaultDLQMaxAge, ledger.DefaultDLQMaxAge,
			config.DefaultUnservedAfter, queue.DefaultUnservedAfter)
	}
	for _, want := range []string{
		fmt.Sprintf("`queue.ack_wait`, default %s", phrase(config.DefaultAckWait)),
		fmt.Sprintf("`queue.max_deliver`, default %d", config.DefaultMaxDeliver),
		fmt.Sprintf("AckWait %s and MaxDeliver %d", phrase(ledger.DefaultAckWait), ledger.DefaultMaxDeliver),
		fmt.Sprintf("`MaxAckPending` %d, `MaxWaiting` %d", ledger.DefaultMaxAckPending, ledger.DefaultMaxWaiting),
		fmt.Sprintf("`Duplicates` %s (dedupe by `Nats-Msg-Id`", phrase(ledger.DefaultDedupeWindow)),
		fmt.Sprintf("`MaxAge` %s (`queue.results_max_age`), `Duplicates` %s", phrase(ledger.DefaultResultsMaxAge), phrase(ledger.DefaultDedupeWindow)),
		fmt.Sprintf("`MaxAge` %s (`queue.dlq_max_age`)", phrase(ledger.DefaultDLQMaxAge)),
		fmt.Sprintf("TTL %s, history 1", phrase(ledger.DefaultStatusTTL)),
		fmt.Sprintf("`queue.unserved_after` (default %s;", phrase(config.DefaultUnservedAfter)),
		fmt.Sprintf("its buffer of %d was full", queue.DefaultEventBuffer),
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("docs/PROTOCOL.md does not say %q", want)
		}
	}
}
