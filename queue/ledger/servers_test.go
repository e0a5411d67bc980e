package ledger

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/internal/testutil"
	"github.com/agentfleet/fleet/queue/embedded"
)

// The servers the JetStream tests run on: one embedded node and a 3-node
// cluster, each started once per test binary on first use and stopped by
// TestMain (tests make fresh operations and job ids, so they never see each
// other's requests).

// TestServers is a running JetStream deployment and one connection per
// server (on a single node, several connections to it).
type TestServers struct {
	Name string
	// Replicas is the replica count streams are created with.
	Replicas int
	// Conns are open connections, one per server of a cluster (three to a
	// single node).
	Conns []*nats.Conn

	stop func()
}

var (
	serversMu sync.Mutex
	servers   = map[string]*TestServers{}
	failed    = map[string]error{}
)

// SingleNode returns the embedded single-node server, starting it on first
// use.
func SingleNode(t testing.TB) *TestServers { return testServers(t, "single", startSingle) }

// R3Cluster returns the 3-node cluster, starting it on first use; streams
// on it are created with 3 replicas.
func R3Cluster(t testing.TB) *TestServers { return testServers(t, "r3", startCluster) }

func testServers(t testing.TB, name string, start func() (*TestServers, error)) *TestServers {
	t.Helper()
	serversMu.Lock()
	defer serversMu.Unlock()
	if s := servers[name]; s != nil {
		return s
	}
	if err := failed[name]; err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	begin := time.Now()
	s, err := start()
	if err != nil {
		failed[name] = err
		t.Fatalf("start %s: %v", name, err)
	}
	t.Logf("%s servers ready in %s", name, time.Since(begin).Round(time.Millisecond))
	servers[name] = s
	return s
}

func TestMain(m *testing.M) {
	code := m.Run()
	serversMu.Lock()
	for _, s := range servers {
		s.stop()
	}
	serversMu.Unlock()
	os.Exit(code)
}

func connectAll(urls []string) ([]*nats.Conn, error) {
	var ncs []*nats.Conn
	for i, u := range urls {
		nc, err := nats.Connect(u, nats.Name(fmt.Sprintf("ledger-test-%d", i)), nats.MaxReconnects(-1))
		if err != nil {
			for _, c := range ncs {
				c.Close()
			}
			return nil, err
		}
		ncs = append(ncs, nc)
	}
	return ncs, nil
}

func startSingle() (*TestServers, error) {
	dir, err := os.MkdirTemp("", "ledger-single-")
	if err != nil {
		return nil, err
	}
	e, err := embedded.StartEmbedded(context.Background(), embedded.EmbeddedConfig{StoreDir: dir,
		Listen: "127.0.0.1:-1", ServerName: "ledger-single"})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	url := e.ClientURL()
	ncs, err := connectAll([]string{url, url, url})
	if err != nil {
		e.Shutdown()
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return &TestServers{Name: "single", Replicas: 1, Conns: ncs, stop: func() {
		for _, nc := range ncs {
			nc.Close()
		}
		e.Shutdown()
		_ = os.RemoveAll(dir)
	}}, nil
}

// startCluster starts three servers with JetStream on loopback, routed to
// each other, and waits until the cluster has a meta leader.
func startCluster() (*TestServers, error) {
	dir, err := os.MkdirTemp("", "ledger-r3-")
	if err != nil {
		return nil, err
	}
	var srvs []*server.Server
	stopAll := func() {
		for _, s := range srvs {
			s.Shutdown()
			s.WaitForShutdown()
		}
		_ = os.RemoveAll(dir)
	}
	// The servers start together: a clustered JetStream server is not
	// ready for connections before it finds its peers.
	ports := make([]int, 3)
	var routes []string
	for i := range ports {
		if ports[i], err = freePort(); err != nil {
			stopAll()
			return nil, err
		}
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", ports[i]))
	}
	srvs = make([]*server.Server, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i := range srvs {
		opts := &server.Options{ServerName: fmt.Sprintf("r3-n%d", i+1), Host: "127.0.0.1", Port: -1, NoSigs: true, NoLog: true,
			JetStream: true, StoreDir: filepath.Join(dir, fmt.Sprint(i)), JetStreamMaxMemory: 64 << 20, JetStreamMaxStore: 1 << 30,
			Cluster: server.ClusterOpts{Name: "ledger-r3", Host: "127.0.0.1", Port: ports[i]},
			Routes:  server.RoutesFromStr(strings.Join(routes, ","))}
		if srvs[i], errs[i] = server.NewServer(opts); errs[i] != nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			go srvs[i].Start()
			if !srvs[i].ReadyForConnections(60 * time.Second) {
				errs[i] = fmt.Errorf("server %s not ready", opts.ServerName)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		srvs = slices.DeleteFunc(srvs, func(s *server.Server) bool { return s == nil })
		stopAll()
		return nil, err
	}
	var urls []string
	for _, s := range srvs {
		urls = append(urls, s.ClientURL())
	}
	ncs, err := connectAll(urls)
	if err != nil {
		stopAll()
		return nil, err
	}
	ts := &TestServers{Name: "r3", Replicas: 3, Conns: ncs, stop: func() {
		for _, nc := range ncs {
			nc.Close()
		}
		stopAll()
	}}
	// Every server must answer JetStream API requests (a meta leader is
	// elected, and each knows the three peers).
	for _, nc := range ncs {
		js, err := jetstream.New(nc)
		if err != nil {
			ts.stop()
			return nil, err
		}
		if err := testutil.Poll(60*time.Second, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_, err := js.AccountInfo(ctx)
			return err
		}); err != nil {
			ts.stop()
			return nil, fmt.Errorf("cluster without a meta leader: %w", err)
		}
	}
	return ts, nil
}

// freePort returns a loopback port nothing listens on now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
