package config

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Validate checks c, as Load does, and fills in the derived defaults
// (Queue.HeartbeatEvery = AckWait/3 and Monty.Pool = Worker.Slots when 0).
// It returns a *ValidationError listing every problem. Use it on a Config
// built or changed in code.
func (c *Config) Validate() error {
	if ps := c.validate(nil); len(ps) > 0 {
		return &ValidationError{Problems: ps}
	}
	return nil
}

var (
	tokenRE  = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	envVarRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// checker collects problems, tagging each with the source of its field.
type checker struct {
	sources  map[string]string
	problems []Problem
}

func (k *checker) add(field, format string, args ...any) {
	k.problems = append(k.problems, Problem{Field: field, Message: fmt.Sprintf(format, args...), Source: k.sources[field]})
}

func (k *checker) minInt(field string, v, min int) {
	if v < min {
		k.add(field, "must be >= %d, got %d", min, v)
	}
}

func (k *checker) positive(field string, d time.Duration) {
	if d <= 0 {
		k.add(field, "must be > 0, got %s", d)
	}
}

func (k *checker) nonEmpty(field, v string) {
	if strings.TrimSpace(v) == "" {
		k.add(field, "must not be empty")
	}
}

func (k *checker) file(field, p string) {
	if p == "" {
		return
	}
	st, err := os.Stat(p)
	switch {
	case err != nil:
		k.add(field, "names a file that cannot be read: %v", err)
	case st.IsDir():
		k.add(field, "names a directory, not a file: %s", p)
	}
}

func (k *checker) hostPort(field, v string) {
	_, port, err := net.SplitHostPort(v)
	if err != nil {
		k.add(field, "must be host:port, got %q", v)
		return
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		k.add(field, "has an invalid port in %q", v)
	}
}

func (c *Config) validate(sources map[string]string) []Problem {
	k := &checker{sources: sources}
	c.NATS.validate(k)
	c.Queue.validate(k)
	c.Worker.validate(k)
	c.Model.validate(k)
	c.Loop.validate(k)
	c.Monty.validate(k)
	if c.Monty.Pool == 0 && c.Worker.Slots > 0 {
		c.Monty.Pool = c.Worker.Slots
	}
	return k.problems
}

func (n *NATS) validate(k *checker) {
	auth := []struct{ field, v string }{
		{"nats.creds", n.Creds}, {"nats.nkey_seed", n.NKeySeed}, {"nats.token", n.Token}, {"nats.user", n.User},
	}
	var set []string
	for _, a := range auth {
		if a.v != "" {
			set = append(set, a.field)
		}
	}
	if n.URL == "" {
		// The embedded server listens without client auth.
		for _, f := range append(set, fieldIf("nats.password", n.Password), fieldIf("nats.tls.ca", n.TLS.CA),
			fieldIf("nats.tls.cert", n.TLS.Cert), fieldIf("nats.tls.key", n.TLS.Key)) {
			if f != "" {
				k.add(f, "is set but nats.url is empty: the embedded server takes no client credentials or TLS; set nats.url to connect to a server")
			}
		}
	} else {
		for _, u := range strings.Split(n.URL, ",") {
			u = strings.TrimSpace(u)
			if u == "" {
				k.add("nats.url", "has an empty entry in %q", n.URL)
				continue
			}
			pu, err := url.Parse(u)
			if err != nil {
				k.add("nats.url", "is not a URL: %v", err)
				continue
			}
			switch pu.Scheme {
			case "nats", "tls", "ws", "wss":
			default:
				k.add("nats.url", "must use nats://, tls://, ws:// or wss://, got %q", u)
			}
		}
		if len(set) > 1 {
			k.add(set[1], "conflicts with %s: use one of creds, nkey_seed, token, user+password", set[0])
		}
		if n.User != "" && n.Password == "" {
			k.add("nats.password", "must be set with nats.user")
		}
		if n.Password != "" && n.User == "" {
			k.add("nats.user", "must be set with nats.password")
		}
		k.file("nats.creds", n.Creds)
		k.file("nats.nkey_seed", n.NKeySeed)
		if (n.TLS.Cert == "") != (n.TLS.Key == "") {
			if n.TLS.Cert != "" {
				k.add("nats.tls.key", "must be set with nats.tls.cert")
			} else {
				k.add("nats.tls.cert", "must be set with nats.tls.key")
			}
		}
		k.file("nats.tls.ca", n.TLS.CA)
		k.file("nats.tls.cert", n.TLS.Cert)
		k.file("nats.tls.key", n.TLS.Key)
	}
	if n.ConnectRetryFor < 0 {
		k.add("nats.connect_retry_for", "must be >= 0 (0 = a single try), got %s", n.ConnectRetryFor)
	}
	e := n.Embedded
	k.hostPort("nats.embedded.listen", e.Listen)
	k.nonEmpty("nats.embedded.store_dir", e.StoreDir)
	if e.MaxMemory < 0 {
		k.add("nats.embedded.max_memory", "must be >= 0, got %d", e.MaxMemory)
	}
	if e.MaxStore < 0 {
		k.add("nats.embedded.max_store", "must be >= 0, got %d", e.MaxStore)
	}
}

func fieldIf(field, v string) string {
	if v == "" {
		return ""
	}
	return field
}

func (q *Queue) validate(k *checker) {
	if q.AckWait < time.Second {
		k.add("queue.ack_wait", "must be >= 1s, got %s", q.AckWait)
	}
	k.minInt("queue.max_deliver", q.MaxDeliver, 1)
	if q.Replicas < 0 || q.Replicas > 5 {
		k.add("queue.replicas", "must be 0 (keep existing, else 1) to 5, got %d", q.Replicas)
	}
	k.positive("queue.results_max_age", q.ResultsMaxAge)
	k.positive("queue.dlq_max_age", q.DLQMaxAge)
	k.positive("queue.transcripts_max_age", q.TranscriptsMaxAge)
	if q.TranscriptsMaxAge > 0 && q.TranscriptsMaxAge < q.ResultsMaxAge {
		k.add("queue.transcripts_max_age", "must be >= queue.results_max_age (%s), got %s", q.ResultsMaxAge, q.TranscriptsMaxAge)
	}
	for i, b := range q.Backoff {
		if b <= 0 {
			k.add(fmt.Sprintf("queue.backoff[%d]", i), "must be > 0, got %s", b)
		}
	}
	if q.DrainGrace < 0 {
		k.add("queue.drain_grace", "must be >= 0, got %s", q.DrainGrace)
	}
	k.positive("queue.park_timeout", q.ParkTimeout)
	if q.ResultsMaxAge > 0 && q.ParkTimeout >= q.ResultsMaxAge {
		k.add("queue.park_timeout", "must be < queue.results_max_age (%s): the waiting record lives there, got %s", q.ResultsMaxAge, q.ParkTimeout)
	}
	if q.UnservedAfter < 0 {
		k.add("queue.unserved_after", "must be >= 0 (0 = never), got %s", q.UnservedAfter)
	}
	if q.PriorityStreak < 1 || q.PriorityStreak > 10000 {
		k.add("queue.priority_streak", "must be 1..10000, got %d", q.PriorityStreak)
	}
	switch {
	case q.HeartbeatEvery < 0:
		k.add("queue.heartbeat_every", "must be >= 0 (0 = ack_wait/3), got %s", q.HeartbeatEvery)
	case q.HeartbeatEvery == 0:
		q.HeartbeatEvery = q.AckWait / 3
	case q.HeartbeatEvery >= q.AckWait:
		k.add("queue.heartbeat_every", "must be less than queue.ack_wait (%s), got %s", q.AckWait, q.HeartbeatEvery)
	}
}

func (w *Worker) validate(k *checker) {
	k.minInt("worker.slots", w.Slots, 1)
	k.nonEmpty("worker.agents_dir", w.AgentsDir)
	if w.PushedAgents {
		k.nonEmpty("worker.pushed_agents_dir", w.PushedAgentsDir)
		if filepath.Clean(w.PushedAgentsDir) == filepath.Clean(w.AgentsDir) {
			k.add("worker.pushed_agents_dir", "must differ from worker.agents_dir (it is emptied at start), got %q", w.PushedAgentsDir)
		}
	}
	for i, op := range w.Operations {
		if !tokenRE.MatchString(op) {
			k.add(fmt.Sprintf("worker.operations[%d]", i), "must be 1-64 of A-Z a-z 0-9 _ -, got %q", op)
		}
	}
	k.nonEmpty("worker.name", w.Name)
	if w.MetricsListen != "" {
		k.hostPort("worker.metrics_listen", w.MetricsListen)
	}
	if w.ConsoleListen != "" {
		k.hostPort("worker.console_listen", w.ConsoleListen)
		if w.ConsoleListen == w.MetricsListen {
			k.add("worker.console_listen", "is worker.metrics_listen's address too, %q", w.ConsoleListen)
		}
	}
	if w.PresenceEvery < 0 {
		k.add("worker.presence_every", "must not be negative, got %s", w.PresenceEvery)
	}
	k.nonEmpty("worker.workspace_dir", w.WorkspaceDir)
}

// validate checks a remote server's settings under prefix (a missing
// base_url is the caller's to report).
func (r Remote) validate(k *checker, prefix string) {
	if r.BaseURL != "" {
		if u, err := url.Parse(r.BaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			k.add(prefix+".base_url", "must be an http:// or https:// URL, got %q", r.BaseURL)
		}
	}
	if r.APIKeyEnv != "" {
		if !envVarRE.MatchString(r.APIKeyEnv) {
			k.add(prefix+".api_key_env", "must be an environment variable name, got %q", r.APIKeyEnv)
		} else if os.Getenv(r.APIKeyEnv) == "" {
			k.add(prefix+".api_key_env", "names %s, which is not set", r.APIKeyEnv)
		}
	}
	k.positive(prefix+".timeout", r.Timeout)
	k.minInt(prefix+".max_retries", r.MaxRetries, 0)
}

// validate checks the teacher: nothing when it is off (no base_url),
// except that always needs it.
func (t Teacher) validate(k *checker) {
	if t.BaseURL == "" {
		if t.Always {
			k.add("model.teacher.always", "needs model.teacher.base_url")
		}
		return
	}
	if t.Model == "" {
		k.add("model.teacher.model", "is required with model.teacher.base_url")
	}
	t.Remote().validate(k, "model.teacher")
}

func (m *Model) validate(k *checker) {
	m.Teacher.validate(k)
	switch m.Backend {
	case BackendLlama:
		k.nonEmpty("model.path", m.Path)
	case BackendRemote:
		if m.Remote.BaseURL == "" {
			k.add("model.remote.base_url", "is required with model.backend: remote")
		}
		m.Remote.validate(k, "model.remote")
	case BackendScripted:
		if m.Scripted.Script == "" {
			k.add("model.scripted.script", "is required with model.backend: scripted")
		} else {
			k.file("model.scripted.script", m.Scripted.Script)
		}
	case BackendExpert:
	default:
		k.add("model.backend", "must be %s, %s, %s or %s, got %q", BackendLlama, BackendRemote, BackendScripted,
			BackendExpert, m.Backend)
	}
	if m.BatchSize == DefaultBatchSize && m.ContextSize >= 256 && m.ContextSize < DefaultBatchSize {
		m.BatchSize = m.ContextSize // the default never exceeds a small context
	}
	k.minInt("model.batch_size", m.BatchSize, 1)
	k.minInt("model.context_size", m.ContextSize, 256)
	if m.BatchSize > m.ContextSize && m.ContextSize >= 256 {
		k.add("model.batch_size", "must not exceed model.context_size (%d), got %d", m.ContextSize, m.BatchSize)
	}
	k.minInt("model.max_tokens", m.MaxTokens, 1)
	if m.MaxTokens >= m.ContextSize && m.ContextSize >= 256 {
		k.add("model.max_tokens", "must be less than model.context_size (%d), got %d", m.ContextSize, m.MaxTokens)
	}
	k.minInt("model.max_contexts", m.MaxContexts, 1)
	k.nonEmpty("model.cache_dir", m.CacheDir)
	if st, err := os.Stat(m.CacheDir); err == nil && !st.IsDir() {
		k.add("model.cache_dir", "names a file, not a directory: %s", m.CacheDir)
	}
	k.positive("model.fetch_timeout", m.FetchTimeout)
	if m.PromptLog != "" && m.Backend != BackendLlama {
		k.add("model.prompt_log", "is only written by model.backend: %s, got %s", BackendLlama, m.Backend)
	}
	if m.Temperature < 0 {
		k.add("model.temperature", "must be >= 0, got %g", m.Temperature)
	}
	k.minInt("model.top_k", m.TopK, 0)
	if m.TopP < 0 || m.TopP > 1 {
		k.add("model.top_p", "must be between 0 and 1, got %g", m.TopP)
	}
	if m.MinP < 0 || m.MinP > 1 {
		k.add("model.min_p", "must be between 0 and 1, got %g", m.MinP)
	}
}

func (l *Loop) validate(k *checker) {
	k.minInt("loop.max_turns", l.MaxTurns, 1)
	k.positive("loop.step_timeout", l.StepTimeout)
	k.positive("loop.total_timeout", l.TotalTimeout)
	if l.StepTimeout > 0 && l.TotalTimeout > 0 && l.TotalTimeout < l.StepTimeout {
		k.add("loop.total_timeout", "must be >= loop.step_timeout (%s), got %s", l.StepTimeout, l.TotalTimeout)
	}
	k.positive("loop.tool_timeout", l.ToolTimeout)
	if l.MaxToolCallsPerTurn == 0 || l.MaxToolCallsPerTurn < -1 {
		k.add("loop.max_tool_calls_per_turn", "must be >= 1 or -1 (no cap), got %d", l.MaxToolCallsPerTurn)
	}
	if l.ArgErrorsPerTool < -1 {
		k.add("loop.arg_errors_per_tool", "must be >= 0 (0 = default) or -1 (no limit), got %d", l.ArgErrorsPerTool)
	}
	if l.ArgErrors < -1 {
		k.add("loop.arg_errors", "must be >= 0 (0 = default) or -1 (no cap), got %d", l.ArgErrors)
	}
	k.minInt("loop.context_tokens", l.ContextTokens, 0)
}

func (m *Monty) validate(k *checker) {
	k.nonEmpty("monty.binary", m.Binary)
	k.minInt("monty.pool", m.Pool, 0)
	k.minInt("monty.max_runs", m.MaxRuns, 1)
	if m.MemoryLimit <= 0 {
		k.add("monty.memory_limit", "must be > 0, got %d", m.MemoryLimit)
	}
	k.minInt("monty.recursion_limit", m.RecursionLimit, 1)
	k.positive("monty.timeout", m.Timeout)
}
