package main

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/agents/agentkv"
	"github.com/agentfleet/fleet/cairn/pym"
	"github.com/agentfleet/fleet/config"
	"github.com/agentfleet/fleet/jobrun"
	"github.com/agentfleet/fleet/queue/presence"
	"github.com/agentfleet/fleet/queue/wire"
)

// agentSet is the worker's agents: those of its local folder and, with
// worker.pushed_agents, those of the fleet_agents bucket, followed as new
// versions are pushed. A local agent wins over a pushed one of the same
// operation.
type agentSet struct {
	local   map[string]*agents.Definition
	watcher *agentkv.Watcher // nil without pushed agents
	// onOperations, when set, is called after a pushed agent loaded (the
	// engine then serves a new operation); set before updates matter.
	onOperations atomic.Pointer[func()]
}

// source answers jobrun's question for a job: the agent new jobs of op use.
func (s *agentSet) source(op string) (jobrun.Agent, bool) {
	if d, ok := s.local[op]; ok {
		return jobrun.Agent{Def: d}, true
	}
	if s.watcher != nil {
		if a, ok := s.watcher.Lookup(op); ok {
			return jobrun.Agent{Def: a.Def, Version: a.Version, Digest: a.Digest}, true
		}
	}
	return jobrun.Agent{}, false
}

// versions is the presence record's agents: per operation, the pushed
// agent's digest its new jobs run, or presence.AgentLocal.
func (s *agentSet) versions() map[string]string {
	out := map[string]string{}
	for op := range s.local {
		out[op] = presence.AgentLocal
	}
	if s.watcher != nil {
		for _, op := range s.watcher.Operations() {
			if _, ok := out[op]; ok {
				continue
			}
			if a, ok := s.watcher.Lookup(op); ok {
				out[op] = a.Digest
			}
		}
	}
	return out
}

// startPushedAgents starts watching the fleet_agents bucket (created when
// missing) and returns the set. Updates are logged.
func startPushedAgents(ctx context.Context, cfg *config.Config, nc *nats.Conn, local map[string]*agents.Definition,
	log *slog.Logger) (*agentSet, error) {
	set := &agentSet{local: local}
	if !cfg.Worker.PushedAgents {
		return set, nil
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	kv, err := agentkv.Ensure(ctx, js, agentkv.BucketConfig{Replicas: cfg.Queue.Replicas})
	if err != nil {
		return nil, err
	}
	w, err := agentkv.NewWatcher(agentkv.WatchConfig{
		KV:       kv,
		CacheDir: cfg.Worker.PushedAgentsDir,
		Load:     agents.LoadOptions{SchemaFromPym: pym.SchemaFromFile},
		Logger:   log.With("component", "pushed_agents"),
		OnUpdate: func(u agentkv.Update) {
			if _, isLocal := local[u.Operation]; isLocal && !u.Deleted && u.Err == nil {
				log.Warn("pushed agent ignored: the local agents folder serves this operation", "operation", u.Operation,
					"pushed_version", u.Version)
			}
			if f := set.onOperations.Load(); f != nil && u.Err == nil && !u.Deleted {
				(*f)()
			}
		},
	})
	if err != nil {
		return nil, err
	}
	if err := w.Start(ctx); err != nil {
		return nil, err
	}
	set.watcher = w
	return set, nil
}

// stop ends the watch.
func (s *agentSet) stop() {
	if s.watcher != nil {
		s.watcher.Stop()
	}
}

// operations returns the operations to serve: worker.operations, or every
// agent of the set, sorted. Each must have an agent and be a valid queue
// operation.
func (s *agentSet) operations(cfg *config.Config) ([]string, error) {
	have := map[string]bool{}
	for op := range s.local {
		have[op] = true
	}
	if s.watcher != nil {
		for _, op := range s.watcher.Operations() {
			have[op] = true
		}
	}
	where := cfg.Worker.AgentsDir
	if cfg.Worker.PushedAgents {
		where += " or the " + agentkv.Bucket + " bucket"
	}
	var ops []string
	if len(cfg.Worker.Operations) > 0 {
		for _, op := range cfg.Worker.Operations {
			if !have[op] {
				return nil, fmt.Errorf("worker.operations lists %q, which no agent in %s serves", op, where)
			}
			ops = append(ops, op)
		}
	} else {
		for op := range have {
			ops = append(ops, op)
		}
	}
	if len(ops) == 0 {
		return nil, fmt.Errorf("no agent found in %s (one folder per operation with an agent.yaml)", where)
	}
	slices.Sort(ops)
	ops = slices.Compact(ops)
	for _, op := range ops {
		if !wire.ValidOperation(op) {
			return nil, fmt.Errorf("operation %q cannot be a queue operation (1-64 of a-z 0-9 _ -)", op)
		}
	}
	return ops, nil
}
