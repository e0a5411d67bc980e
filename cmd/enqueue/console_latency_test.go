package main

// The console browser test's latency check: when each event reached the
// page against when the server published it.

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go"

	"github.com/agentfleet/fleet/queue/wire"
)

// published records when the test's own subscriber received each event of
// a job ("attempt/seq"): the moment the server published it, give or take
// the in-process delivery.
type published struct {
	mu sync.Mutex
	at map[string]time.Time
}

func publishTimes(t *testing.T, nc *nats.Conn, jobID string) *published {
	t.Helper()
	p := &published{at: map[string]time.Time{}}
	sub, err := nc.Subscribe(wire.EventSubject(jobID), func(m *nats.Msg) {
		now := time.Now()
		e, err := wire.DecodeEvent(m.Data, m.Header.Get(wire.HeaderContentType))
		if err != nil {
			return
		}
		p.mu.Lock()
		p.at[fmt.Sprintf("%d/%d", e.Attempt, e.Seq)] = now
		p.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *published) snapshot() map[string]time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.at)
}

// liveBound is how long after its publication an event should take to
// show on a live job page: the median must be within it, every event
// within liveWorst (a machine this loaded, under the race detector, has
// outliers; a stream that polled or buffered would miss both).
const (
	liveBound = 100 * time.Millisecond
	liveWorst = 5 * liveBound
)

// checkLatency compares when each event was published with when the page
// showed its row. Every event the server did not render with the page
// (static) must have been shown live: turns 2 and 3 at least.
func checkLatency(t *testing.T, u *consoleUI, pub map[string]time.Time, static []string) {
	t.Helper()
	raw, err := chromedp.Run(u.tab, chromedp.Evaluate[string](`sessionStorage.getItem("fleet-shown") || "{}"`))
	if err != nil {
		t.Fatal(err)
	}
	var shown map[string]float64
	if err := json.Unmarshal([]byte(raw), &shown); err != nil {
		t.Fatal(err)
	}
	var lat []time.Duration
	for key, at := range pub {
		if slices.Contains(static, key) {
			continue
		}
		ms, ok := shown[key]
		if !ok {
			t.Errorf("event %s was published but never shown live", key)
			continue
		}
		lat = append(lat, time.UnixMicro(int64(ms*1000)).Sub(at))
	}
	if len(lat) < 8 { // turns 2 and 3: their starts, model outputs, calls and results
		t.Fatalf("only %d events shown live (%d rendered with the page)", len(lat), len(static))
	}
	slices.Sort(lat)
	load, _ := os.ReadFile("/proc/loadavg")
	median, worst := lat[len(lat)/2], lat[len(lat)-1]
	t.Logf("live latency, publication to row shown, %d events (%d rendered with the page): min %s, median %s, max %s (load %s)",
		len(lat), len(static), lat[0].Round(10*time.Microsecond), median.Round(10*time.Microsecond),
		worst.Round(10*time.Microsecond), strings.TrimSpace(string(load)))
	if median > liveBound || worst > liveWorst {
		t.Errorf("live rows took a median %s, at worst %s (bounds %s and %s)", median, worst, liveBound, liveWorst)
	}
}
