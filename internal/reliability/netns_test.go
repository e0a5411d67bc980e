package reliability

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentfleet/fleet/queue/wire"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
)

// serverChildEnv makes a child process run one cluster node (serverMain).
const serverChildEnv = "FLEET_RELIABILITY_SERVER"

// serverMain runs a clustered nats-server with JetStream until killed.
func serverMain() int {
	get := func(k string) string { return os.Getenv("FLEET_REL_SRV_" + k) }
	cport, _ := strconv.Atoi(get("CLIENT_PORT"))
	rport, _ := strconv.Atoi(get("CLUSTER_PORT"))
	opts := &server.Options{
		ServerName: get("NAME"), Host: get("HOST"), Port: cport, NoSigs: true,
		JetStream: true, StoreDir: get("STORE"), JetStreamMaxMemory: 64 << 20, JetStreamMaxStore: 1 << 30,
		Cluster: server.ClusterOpts{Name: "fleet-netns", Host: get("HOST"), Port: rport},
		Routes:  server.RoutesFromStr(get("ROUTES")),
		Logtime: true, LogtimeUTC: true, HTTPHost: get("HOST"), HTTPPort: 8222,
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "server:", err)
		return 1
	}
	srv.ConfigureLogger()
	go srv.Start()
	if !srv.ReadyForConnections(30*time.Second) || !srv.JetStreamEnabled() {
		fmt.Fprintln(os.Stderr, "server not ready")
		return 1
	}
	fmt.Println("READY")
	select {}
}

// host is one network namespace with its address: a separate host for the
// cluster node and the worker it runs.
type host struct {
	ns, hostVeth, addr string
	node               *proc
	store              string
}

// netnsLab is three namespaces on a bridge in the root namespace.
type netnsLab struct {
	t      *testing.T
	bridge string
	hosts  []*host
	gw     string
}

func run(t *testing.T, args ...string) error {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// newNetnsLab builds the namespaces, or skips the test where the machine
// does not allow it (not root, no ip, no netns support).
func newNetnsLab(t *testing.T) *netnsLab {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("no ip command (iproute2)")
	}
	tag := fmt.Sprintf("fr%04x", rand.IntN(0xffff))
	subnet := fmt.Sprintf("10.213.%d", 1+rand.IntN(250))
	lab := &netnsLab{t: t, bridge: tag + "br", gw: subnet + ".254"}
	t.Cleanup(lab.teardown)
	if err := run(t, "ip", "link", "add", lab.bridge, "type", "bridge"); err != nil {
		t.Skipf("cannot create a bridge: %v", err)
	}
	must := func(args ...string) {
		if err := run(t, args...); err != nil {
			t.Fatal(err)
		}
	}
	must("ip", "addr", "add", lab.gw+"/24", "dev", lab.bridge)
	must("ip", "link", "set", lab.bridge, "up")
	for i := 1; i <= 3; i++ {
		h := &host{ns: fmt.Sprintf("%s-n%d", tag, i), hostVeth: fmt.Sprintf("%sh%d", tag, i), addr: fmt.Sprintf("%s.%d", subnet, i)}
		lab.hosts = append(lab.hosts, h)
		peer := fmt.Sprintf("%sn%d", tag, i)
		if err := run(t, "ip", "netns", "add", h.ns); err != nil {
			t.Skipf("cannot create a network namespace: %v", err)
		}
		must("ip", "link", "add", h.hostVeth, "type", "veth", "peer", "name", peer)
		must("ip", "link", "set", peer, "netns", h.ns)
		must("ip", "link", "set", h.hostVeth, "master", lab.bridge)
		must("ip", "link", "set", h.hostVeth, "up")
		must("ip", "netns", "exec", h.ns, "ip", "addr", "add", h.addr+"/24", "dev", peer)
		must("ip", "netns", "exec", h.ns, "ip", "link", "set", peer, "up")
		must("ip", "netns", "exec", h.ns, "ip", "link", "set", "lo", "up")
		h.store = filepath.Join(t.TempDir(), "js")
	}
	return lab
}

func (lab *netnsLab) teardown() {
	for _, h := range lab.hosts {
		if h.node != nil && h.node.alive() {
			h.node.kill()
		}
		_ = exec.Command("ip", "netns", "del", h.ns).Run()
		_ = exec.Command("ip", "link", "del", h.hostVeth).Run()
	}
	_ = exec.Command("ip", "link", "del", lab.bridge).Run()
}

func (lab *netnsLab) routes() string {
	var r []string
	for _, h := range lab.hosts {
		r = append(r, "nats://"+h.addr+":6222")
	}
	return strings.Join(r, ",")
}

// startNode runs host h's nats-server in its namespace.
func (lab *netnsLab) startNode(h *host, name string) {
	t := lab.t
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", h.ns, exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), serverChildEnv+"=1",
		"FLEET_REL_SRV_NAME="+name, "FLEET_REL_SRV_HOST="+h.addr, "FLEET_REL_SRV_CLIENT_PORT=4222",
		"FLEET_REL_SRV_CLUSTER_PORT=6222", "FLEET_REL_SRV_ROUTES="+lab.routes(), "FLEET_REL_SRV_STORE="+h.store)
	h.node = startCmd(t, name, cmd)
	h.node.waitReady(60 * time.Second)
}

func (h *host) url() string { return "nats://" + h.addr + ":4222" }

// TestNodeLossNetns runs the 3-node cluster as three hosts in network
// namespaces (own addresses on a bridge, traffic through veth pairs), one
// worker process in each host talking to its local node. Two faults, each
// mid-backlog: the host of the FLEET_RUNS leader, made leader of every Raft
// group a job goes through (FLEET_RESULTS, the status bucket, the
// operation's consumer), is cut off (link down on its veth, node and worker
// alive but partitioned; the TCP connections survive, so writes queued
// before the cut arrive late, after the heal) and healed, then the new
// leader's server process is SIGKILLed and restarted. Jobs continue on the
// majority, nothing is lost or duplicated, the node rejoins. Skipped
// without root or iproute2.
func TestNodeLossNetns(t *testing.T) {
	t.Parallel()
	lab := newNetnsLab(t)
	sc := scale(t)
	n := 80 * sc
	start := time.Now()
	for i, h := range lab.hosts {
		lab.startNode(h, fmt.Sprintf("n%d", i+1))
	}
	var urls []string
	for _, h := range lab.hosts {
		urls = append(urls, h.url())
	}
	nc := dial(t, strings.Join(urls, ","))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	streams := streamsEnv{AckWait: 2 * time.Second, MaxDeliver: 20, Replicas: 3}
	ensureStreams(t, js, streams.config())
	rlog := watchResults(t, js, "netns")
	var workers []*proc
	for i, h := range lab.hosts {
		workers = append(workers, startChild(t, childConfig{URL: h.url(), Name: fmt.Sprintf("w%d", i+1), Slots: 2,
			Job: 100 * time.Millisecond, Streams: streams, Engine: "child", Netns: h.ns}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	s := Summary{Test: "node-loss-netns", Jobs: n, Kills: 2}
	var rejoin time.Duration
	var faults []string
	for f, kind := range []string{"link-down", "kill"} {
		victim := lab.leaderHost(t, js)
		if kind == "link-down" {
			gatherLeaders(t, js, nc, victim.node.name)
			t.Logf("fault %d: %s leads FLEET_RUNS, FLEET_RESULTS, KV_fleet_jobs and the lint consumer", f+1, victim.node.name)
		}
		var survivor *host
		for _, h := range lab.hosts {
			if h != victim {
				survivor = h
				break
			}
		}
		// Watch results from a survivor: a client of the cut-off node would
		// see nothing.
		snc := dial(t, survivor.url())
		sjs, _ := jetstream.New(snc)
		tr := newTracker(t, snc)
		// Half the backlog per fault, enqueued just before it.
		if _, err := enqueue(ctx, sjs, "netns", f*n/2, n/2, nil); err != nil {
			t.Fatal(err)
		}
		if !tr.waitDistinct(1, 30*time.Second) {
			t.Fatalf("fault %d: no results before the fault", f+1)
		}
		t.Logf("fault %d: %s of %s at %s (%s UTC)", f+1, kind, victim.node.name, time.Since(start).Round(time.Millisecond), stamp())
		t0 := time.Now()
		switch kind {
		case "link-down":
			if err := run(t, "ip", "link", "set", victim.hostVeth, "down"); err != nil {
				t.Fatal(err)
			}
		case "kill":
			victim.node.kill()
		}
		faults = append(faults, kind+":"+victim.node.name)
		before := tr.distinct()
		// Hold the fault until the majority has noticed it (a new
		// FLEET_RUNS leader, the victim's replica not current) and has
		// finished more jobs.
		noticed := waitLost(t, sjs, victim.node.name, time.Minute)
		// More jobs finished on the majority, or this half's jobs all
		// have results already (a quick backlog can be done before the
		// majority notices the fault).
		for deadline := time.Now().Add(time.Minute); !tr.waitDistinct(before+3, 500*time.Millisecond) &&
			storedCount(t, sjs, "netns") < (f+1)*n/2; {
			if time.Now().After(deadline) {
				t.Fatalf("fault %d (%s): the majority finished no jobs within 1m", f+1, kind)
			}
		}
		if next, ok := tr.nextAfter(t0, time.Second); ok {
			s.Recover = max(s.Recover, next.Sub(t0))
		}
		t.Logf("fault %d: the cluster noticed after %s (%s UTC)", f+1, noticed.Round(time.Millisecond), stamp())
		// Heal.
		r0 := time.Now()
		t.Logf("fault %d: healing %s at %s UTC", f+1, victim.node.name, stamp())
		switch kind {
		case "link-down":
			if err := run(t, "ip", "link", "set", victim.hostVeth, "up"); err != nil {
				t.Fatal(err)
			}
		case "kill":
			lab.startNode(victim, victim.node.name)
		}
		for !replicasCurrent(ctx, sjs, wire.StreamRuns, wire.StreamResults, "KV_"+wire.BucketJobs) {
			if ctx.Err() != nil {
				t.Fatalf("fault %d: %s did not rejoin with current replicas: %s", f+1, victim.node.name,
					replicaStates(sjs, wire.StreamRuns, wire.StreamResults, "KV_"+wire.BucketJobs))
			}
			time.Sleep(100 * time.Millisecond)
		}
		rejoin = max(rejoin, time.Since(r0))
		t.Logf("fault %d (%s of %s): results again after %s, rejoined in %s (%s UTC)%s", f+1, kind, victim.node.name,
			s.Recover.Round(time.Millisecond), time.Since(r0).Round(time.Millisecond), stamp(), lab.nodeStates(wire.StreamResults, "KV_"+wire.BucketJobs))
	}

	deadline := time.Now().Add(time.Minute)
	for storedCount(t, js, "netns") < n {
		if time.Now().After(deadline) {
			diagnose(t, js, "netns", n)
			counts, _ := storedResults(t, js, "netns", n)
			for i := 0; i < n; i++ {
				if id := jobID("netns", i); counts[id] == 0 {
					t.Logf("missing %s: %s", id, rlog.of(id))
				}
			}
			t.Logf("node states at %s UTC:%s", stamp(), lab.nodeStates())
			t.Errorf("only %d/%d jobs have results after 1m", storedCount(t, js, "netns"), n)
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	s.Elapsed = time.Since(start)
	stopWorkers(t, workers)
	verdict(t, js, "netns", n, &s)
	expectRunsEmpty(t, js)
	s.Extra = fmt.Sprintf("hosts=3(netns) replicas=3 faults=%s rejoin=%s", strings.Join(faults, ","), rejoin.Round(time.Millisecond))
	report(t, s)
}

// leaderHost returns the host whose node leads FLEET_RUNS.
func (lab *netnsLab) leaderHost(t *testing.T, js jetstream.JetStream) *host {
	t.Helper()
	leader := streamLeader(t, js, wire.StreamRuns).Leader
	for _, h := range lab.hosts {
		if h.node.name == leader {
			return h
		}
	}
	t.Fatalf("FLEET_RUNS leader %q is not one of the hosts", leader)
	return nil
}

// storedCount is how many jobs of prefix have a stored result.
func storedCount(t *testing.T, js jetstream.JetStream, prefix string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, wire.StreamResults)
	if err != nil {
		return 0
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(wire.SubjectResultsPrefix+"*"))
	if err != nil {
		return 0
	}
	c := 0
	for subj := range info.State.Subjects {
		if strings.HasPrefix(subj, wire.SubjectResultsPrefix+prefix+"-") {
			c++
		}
	}
	return c
}

// waitLost waits until the survivors see node gone from FLEET_RUNS: another
// leader, and node's replica offline or not current. It returns how long
// that took.
func waitLost(t *testing.T, js jetstream.JetStream, node string, d time.Duration) time.Duration {
	t.Helper()
	t0 := time.Now()
	for time.Since(t0) < d {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		s, err := js.Stream(ctx, wire.StreamRuns)
		var info *jetstream.StreamInfo
		if err == nil {
			info, err = s.Info(ctx)
		}
		cancel()
		if err == nil && info.Cluster != nil && info.Cluster.Leader != "" && info.Cluster.Leader != node {
			for _, r := range info.Cluster.Replicas {
				if r.Name == node && (r.Offline || !r.Current) {
					return time.Since(t0)
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("the survivors did not notice the loss of %s within %s: %s", node, d, replicaStates(js, wire.StreamRuns))
	return 0
}
