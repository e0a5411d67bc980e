package batche2e

import (
	"context"
	"io"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentfleet/fleet/internal/testutil"
	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/wire"
)

// cutProxy forwards TCP connections to target until cut, which closes
// every connection at once: a lost network, not a closed client.
type cutProxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln}
	t.Cleanup(p.cut)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(s, c); s.Close() }()
			go func() { _, _ = io.Copy(c, s); c.Close() }()
		}
	}()
	return p
}

func (p *cutProxy) url() string { return "nats://" + p.ln.Addr().String() }

func (p *cutProxy) cut() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// TestLostConnectionFanOut: the network between `enqueue run` and the
// server goes away while it publishes a batch. enqueue stops, says so and
// exits 3; the batch record keeps the count of its last chunk, which the
// requests the server stored exceed by less than a chunk; once a worker
// runs them, batch status counts exactly the requests that were stored.
func TestLostConnectionFanOut(t *testing.T) {
	const n = 1200
	_, bin := binaries(t)
	url, nc, js := benchServer(t)
	dir := benchProject(t, n)
	cl, err := client.NewClient(nc, client.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	proxy := newCutProxy(t, strings.TrimPrefix(url, "nats://"))
	cmd, stderr := startFanOut(t, ctx, cl, bin, proxy.url(), dir, n, "lost")
	proxy.cut()
	err = cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 || !strings.Contains(stderr.String(), "batch lost") {
		t.Fatalf("enqueue after the cut: %v, stderr %q", err, stderr.String())
	}
	rec, err := cl.Batch(ctx, "lost")
	if err != nil {
		t.Fatal(err)
	}
	stored := runsStored(t, ctx, js)
	t.Logf("record: %s, %d published; FLEET_RUNS holds %d of %d", rec.State, rec.Published, stored, n)
	if rec.State != wire.BatchPublishing || rec.Published == 0 || stored < rec.Published || stored-rec.Published > wire.BatchIndexChunk {
		t.Fatalf("record %s with %d published, %d requests stored", rec.State, rec.Published, stored)
	}
	// A worker runs what was stored: the status counts exactly that.
	startWorker(t, workerSpec{name: "after-cut", natsURL: url, slots: 2,
		script: "steps:\n  - submit: {status: success, summary: checked, changed_files: []}\n"})
	testutil.Eventually(t, 2*time.Minute, "the stored jobs counted", func() error {
		st, err := cl.BatchStatus(ctx, "lost")
		if err != nil {
			return err
		}
		if st.Total.Done != stored || st.Total.Published != stored || st.Total.Succeeded != stored {
			return &countErr{st.Total, stored}
		}
		return nil
	})
}

type countErr struct {
	got  client.BatchCounts
	want int
}

func (e *countErr) Error() string {
	return "counts " + strconv.Itoa(e.got.Done) + " done, " + strconv.Itoa(e.got.Published) + " published; want " + strconv.Itoa(e.want)
}
