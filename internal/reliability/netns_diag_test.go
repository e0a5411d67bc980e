package reliability

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentfleet/fleet/queue/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// resultLog records every stored result of a prefix as an ordered consumer
// on FLEET_RESULTS delivers it (stream sequence and time), so that a result
// that was stored and later vanished can be told from one never stored.
type resultLog struct {
	mu   sync.Mutex
	seen map[string][]string
}

func watchResults(t *testing.T, js jetstream.JetStream, prefix string) *resultLog {
	t.Helper()
	rl := &resultLog{seen: map[string][]string{}}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		for ctx.Err() == nil {
			c, err := js.OrderedConsumer(ctx, wire.StreamResults, jetstream.OrderedConsumerConfig{
				FilterSubjects: []string{wire.SubjectResultsPrefix + "*"}})
			if err != nil {
				time.Sleep(200 * time.Millisecond)
				continue
			}
			cc, err := c.Consume(func(m jetstream.Msg) {
				id := strings.TrimPrefix(m.Subject(), wire.SubjectResultsPrefix)
				if !strings.HasPrefix(id, prefix+"-") {
					return
				}
				md, _ := m.Metadata()
				var seq uint64
				if md != nil {
					seq = md.Sequence.Stream
				}
				rl.mu.Lock()
				rl.seen[id] = append(rl.seen[id], fmt.Sprintf("seq=%d at %s", seq, stamp()))
				rl.mu.Unlock()
			})
			if err != nil {
				time.Sleep(200 * time.Millisecond)
				continue
			}
			<-ctx.Done()
			cc.Stop()
		}
	}()
	return rl
}

func (rl *resultLog) of(id string) string {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	if len(rl.seen[id]) == 0 {
		return "never seen stored"
	}
	return "seen stored: " + strings.Join(rl.seen[id], ", ")
}

// stamp is the wall clock for logs that must line up with the servers'.
func stamp() string { return time.Now().UTC().Format("15:04:05.000") }

// nodeStates reads each host's /jsz (stream states as that node sees them).
func (lab *netnsLab) nodeStates(streams ...string) string {
	cl := http.Client{Timeout: time.Second}
	var b strings.Builder
	for _, h := range lab.hosts {
		fmt.Fprintf(&b, "\n  %s:", h.addr)
		resp, err := cl.Get("http://" + h.addr + ":8222/jsz?accounts=true&streams=true")
		if err != nil {
			fmt.Fprintf(&b, " %v", err)
			continue
		}
		var jsz struct {
			ServerName string `json:"server_name"`
			Accounts   []struct {
				Streams []struct {
					Name    string `json:"name"`
					Cluster *struct {
						Leader string `json:"leader"`
					} `json:"cluster"`
					State struct {
						Msgs     uint64 `json:"messages"`
						FirstSeq uint64 `json:"first_seq"`
						LastSeq  uint64 `json:"last_seq"`
						Subjects int    `json:"num_subjects"`
						Deleted  int    `json:"num_deleted"`
					} `json:"state"`
				} `json:"stream_detail"`
			} `json:"account_details"`
		}
		err = json.NewDecoder(resp.Body).Decode(&jsz)
		resp.Body.Close()
		if err != nil {
			fmt.Fprintf(&b, " %v", err)
			continue
		}
		fmt.Fprintf(&b, " %s", jsz.ServerName)
		var lines []string
		for _, a := range jsz.Accounts {
			for _, s := range a.Streams {
				if len(streams) > 0 && !contains(streams, s.Name) {
					continue
				}
				leader := ""
				if s.Cluster != nil {
					leader = s.Cluster.Leader
				}
				lines = append(lines, fmt.Sprintf("%s(leader=%s msgs=%d seq=%d..%d subjects=%d deleted=%d)", s.Name, leader,
					s.State.Msgs, s.State.FirstSeq, s.State.LastSeq, s.State.Subjects, s.State.Deleted))
			}
		}
		sort.Strings(lines)
		b.WriteString(" " + strings.Join(lines, " "))
	}
	return b.String()
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}

// gatherLeaders moves the leadership of FLEET_RESULTS, the fleet_jobs bucket
// and the operation's consumer to node (the FLEET_RUNS leader), so that a
// fault of that node strikes every Raft group a job goes through at once:
// the request, its consumer, its result and its status.
func gatherLeaders(t *testing.T, js jetstream.JetStream, nc *nats.Conn, node string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	type group struct{ name, stepdown string }
	groups := []group{
		{wire.StreamResults, "$JS.API.STREAM.LEADER.STEPDOWN." + wire.StreamResults},
		{"KV_" + wire.BucketJobs, "$JS.API.STREAM.LEADER.STEPDOWN.KV_" + wire.BucketJobs},
		{"consumer lint", "$JS.API.CONSUMER.LEADER.STEPDOWN." + wire.StreamRuns + ".lint"},
	}
	for _, g := range groups {
		for {
			leader := groupLeader(js, g.name)
			if leader == node {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("cannot move the leader of %s to %s (still %q)", g.name, node, leader)
			}
			if leader != "" {
				_, _ = nc.Request(g.stepdown, []byte(`{"placement":{"preferred":"`+node+`"}}`), 2*time.Second)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// groupLeader is the current leader of a stream or of the lint consumer
// ("consumer lint"), "" when unknown.
func groupLeader(js jetstream.JetStream, name string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if name == "consumer lint" {
		c, err := js.Consumer(ctx, wire.StreamRuns, "lint")
		if err != nil {
			return ""
		}
		info, err := c.Info(ctx)
		if err != nil || info.Cluster == nil {
			return ""
		}
		return info.Cluster.Leader
	}
	s, err := js.Stream(ctx, name)
	if err != nil {
		return ""
	}
	info, err := s.Info(ctx)
	if err != nil || info.Cluster == nil {
		return ""
	}
	return info.Cluster.Leader
}
