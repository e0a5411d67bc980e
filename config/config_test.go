package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/agentfleet/fleet/loop"
)

// noEnv is an environment with no FLEET_* variables.
func noEnv(string) (string, bool) { return "", false }

func env(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "fleet.yaml")
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	c, err := load("", noEnv)
	if err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
	host, _ := os.Hostname()
	checks := []struct {
		name      string
		got, want any
	}{
		{"nats.url", c.NATS.URL, ""},
		{"nats.embedded.listen", c.NATS.Embedded.Listen, "127.0.0.1:4222"},
		{"nats.embedded.store_dir", c.NATS.Embedded.StoreDir, "./data/nats"},
		{"nats.embedded.max_memory", c.NATS.Embedded.MaxMemory, 256 * MiB},
		{"nats.embedded.max_store", c.NATS.Embedded.MaxStore, 4 * GiB},
		{"nats.embedded.sync_always", c.NATS.Embedded.SyncAlways, false},
		{"queue.ack_wait", c.Queue.AckWait, 30 * time.Second},
		{"queue.max_deliver", c.Queue.MaxDeliver, 5},
		{"queue.results_max_age", c.Queue.ResultsMaxAge, 24 * time.Hour},
		{"queue.transcripts_max_age", c.Queue.TranscriptsMaxAge, 90 * 24 * time.Hour},
		{"queue.drain_grace", c.Queue.DrainGrace, 30 * time.Second},
		{"queue.heartbeat_every", c.Queue.HeartbeatEvery, 10 * time.Second}, // ack_wait / 3
		{"queue.backoff", c.Queue.Backoff, []time.Duration{time.Second, 5 * time.Second, 15 * time.Second, 30 * time.Second}},
		{"worker.slots", c.Worker.Slots, runtime.NumCPU()},
		{"worker.agents_dir", c.Worker.AgentsDir, "./agents"},
		{"worker.pushed_agents", c.Worker.PushedAgents, false},
		{"worker.pushed_agents_dir", c.Worker.PushedAgentsDir, "./data/agents"},
		{"worker.name", c.Worker.Name, host},
		{"worker.metrics_listen", c.Worker.MetricsListen, ""},
		{"worker.workspace_dir", c.Worker.WorkspaceDir, "./data/workspaces"},
		{"model.backend", c.Model.Backend, "llama"},
		{"model.path", c.Model.Path, "./models/functiongemma-270m-random-q8_0.gguf"},
		{"model.strict", c.Model.Strict, true},
		{"model.batch_size", c.Model.BatchSize, 512},
		{"model.context_size", c.Model.ContextSize, 4096},
		{"model.temperature", c.Model.Temperature, 0.0},
		{"loop.max_turns", c.Loop.MaxTurns, loop.DefaultMaxTurns},
		{"loop.tool_timeout", c.Loop.ToolTimeout, loop.DefaultToolTimeout},
		{"monty.binary", c.Monty.Binary, "./.build/monty/monty"},
		{"monty.pool", c.Monty.Pool, runtime.NumCPU()}, // 0 = slots
		{"monty.max_runs", c.Monty.MaxRuns, 500},
	}
	for _, ch := range checks {
		if !reflect.DeepEqual(ch.got, ch.want) {
			t.Errorf("%s = %v, want %v", ch.name, ch.got, ch.want)
		}
	}
	lc := c.Loop.LoopConfig()
	if lc.MaxTurns != loop.DefaultMaxTurns || lc.StepTimeout != loop.DefaultStepTimeout || lc.TotalTimeout != loop.DefaultTotalTimeout ||
		lc.MaxToolCallsPerTurn != loop.DefaultMaxToolCallsPerTurn {
		t.Errorf("LoopConfig = %+v", lc)
	}
	if _, err := loop.New(lc); err != nil {
		t.Errorf("loop rejects the default LoopConfig: %v", err)
	}
}

func TestFileOverridesDefaults(t *testing.T) {
	t.Parallel()
	p := writeFile(t, `
nats:
  url: nats://10.0.0.5:4222, tls://10.0.0.6:4222
  user: fleet
  password: 0123   # kept as written, not read as a number
queue:
  ack_wait: 1m
  backoff: [2s, 10s]
worker:
  slots: 3
  operations: [lint, docstring]
  name:              # null keeps the default
model:
  backend: remote
  strict: false
  temperature: 0.7
  seed: 18446744073709551615
  remote:
    base_url: http://127.0.0.1:8080/v1
    model: functiongemma
monty:
  memory_limit: 64MiB
  pool: 1
`)
	c, err := load(p, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if c.NATS.URL != "nats://10.0.0.5:4222, tls://10.0.0.6:4222" || c.NATS.User != "fleet" || c.NATS.Password != "0123" {
		t.Errorf("nats = %+v", c.NATS)
	}
	if c.Queue.AckWait != time.Minute || c.Queue.HeartbeatEvery != 20*time.Second {
		t.Errorf("ack_wait %s heartbeat %s, want 1m and 20s", c.Queue.AckWait, c.Queue.HeartbeatEvery)
	}
	if !reflect.DeepEqual(c.Queue.Backoff, []time.Duration{2 * time.Second, 10 * time.Second}) {
		t.Errorf("backoff = %v", c.Queue.Backoff)
	}
	if c.Worker.Slots != 3 || strings.Join(c.Worker.Operations, ",") != "lint,docstring" || c.Worker.Name == "" {
		t.Errorf("worker = %+v", c.Worker)
	}
	if c.Model.Backend != "remote" || c.Model.Strict || c.Model.Temperature != 0.7 || c.Model.Seed != 1<<64-1 || c.Model.Remote.Model != "functiongemma" {
		t.Errorf("model = %+v", c.Model)
	}
	if c.Monty.MemoryLimit != 64*MiB || c.Monty.Pool != 1 {
		t.Errorf("monty = %+v", c.Monty)
	}
	// Untouched keys keep their defaults.
	if c.Model.BatchSize != DefaultBatchSize || c.Loop.MaxTurns != loop.DefaultMaxTurns || c.NATS.Embedded.Listen != DefaultNATSListen ||
		c.NATS.ConnectRetryFor != DefaultConnectRetryFor {
		t.Errorf("defaults lost: batch_size %d max_turns %d listen %s connect_retry_for %s", c.Model.BatchSize, c.Loop.MaxTurns,
			c.NATS.Embedded.Listen, c.NATS.ConnectRetryFor)
	}
}

func TestEnvOverridesFile(t *testing.T) {
	t.Parallel()
	p := writeFile(t, "worker:\n  slots: 3\n  name: from-file\nmodel:\n  path: /file/model.gguf\n")
	c, err := load(p, env(
		"FLEET_WORKER_SLOTS", "7",
		"FLEET_MODEL_PATH", "/env/model.gguf",
		"FLEET_NATS_URL", "nats://127.0.0.1:4333",
		"FLEET_NATS_EMBEDDED_MAX_STORE", "1GB",
		"FLEET_QUEUE_BACKOFF", "1s, 2s,3s",
		"FLEET_WORKER_OPERATIONS", "lint,test",
		"FLEET_MODEL_STRICT", "false",
		"FLEET_WORKER_NAME", "", // empty: ignored
		"FLEET_WORKER_SLOT", "99", // not a key: ignored
	))
	if err != nil {
		t.Fatal(err)
	}
	if c.Worker.Slots != 7 || c.Model.Path != "/env/model.gguf" || c.NATS.URL != "nats://127.0.0.1:4333" {
		t.Errorf("env did not win: slots %d path %s url %s", c.Worker.Slots, c.Model.Path, c.NATS.URL)
	}
	if c.Worker.Name != "from-file" {
		t.Errorf("empty env var overrode the file: name %q", c.Worker.Name)
	}
	if c.NATS.Embedded.MaxStore != 1e9 || c.Model.Strict {
		t.Errorf("max_store %d strict %v", c.NATS.Embedded.MaxStore, c.Model.Strict)
	}
	if !reflect.DeepEqual(c.Queue.Backoff, []time.Duration{time.Second, 2 * time.Second, 3 * time.Second}) ||
		!reflect.DeepEqual(c.Worker.Operations, []string{"lint", "test"}) {
		t.Errorf("lists: %v %v", c.Queue.Backoff, c.Worker.Operations)
	}
}

// Load reads the real environment.
func TestLoadUsesProcessEnv(t *testing.T) {
	t.Setenv("FLEET_WORKER_SLOTS", "0")
	_, err := Load("")
	if err == nil || !strings.Contains(err.Error(), "config: worker.slots must be >= 1, got 0 (set by FLEET_WORKER_SLOTS)") {
		t.Fatalf("err = %v", err)
	}
	t.Setenv("FLEET_WORKER_SLOTS", "2")
	c, err := Load("")
	if err != nil || c.Worker.Slots != 2 {
		t.Fatalf("Load = %+v, %v", c, err)
	}
}

func TestValidationErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		yaml string
		env  []string
		want []string
	}{
		{"slots zero", "worker:\n  slots: 0\n", nil, []string{"worker.slots must be >= 1, got 0 (line 2)"}},
		{"slots from env", "", []string{"FLEET_WORKER_SLOTS", "-1"}, []string{"worker.slots must be >= 1, got -1 (set by FLEET_WORKER_SLOTS)"}},
		{"pushed agents into the agents folder", "worker:\n  pushed_agents: true\n  pushed_agents_dir: ./agents/\n", nil,
			[]string{"worker.pushed_agents_dir must differ from worker.agents_dir (it is emptied at start), got \"./agents/\""}},
		{"env not a number", "", []string{"FLEET_WORKER_SLOTS", "many"}, []string{`worker.slots must be an integer, got "many" (set by FLEET_WORKER_SLOTS)`}},
		{"tls cert without key", "nats:\n  url: nats://h:4222\n  tls:\n    cert: " + dir + "\n", nil, []string{
			"nats.tls.key must be set with nats.tls.cert",
			"nats.tls.cert names a directory, not a file: " + dir + " (line 4)",
		}},
		{"tls key without cert", "nats:\n  url: nats://h:4222\n  tls:\n    key: /nope/key.pem\n", nil, []string{
			"nats.tls.cert must be set with nats.tls.key",
			"nats.tls.key names a file that cannot be read: stat /nope/key.pem: no such file or directory (line 4)",
		}},
		{"remote without base_url", "model:\n  backend: remote\n", nil, []string{"model.remote.base_url is required with model.backend: remote"}},
		{"remote bad url", "model:\n  backend: remote\n  remote:\n    base_url: localhost:8080\n", nil, []string{`model.remote.base_url must be an http:// or https:// URL, got "localhost:8080" (line 4)`}},
		{"remote key env unset", "model:\n  backend: remote\n  remote:\n    base_url: http://h/v1\n    api_key_env: FLEET_TEST_SURELY_UNSET_KEY\n", nil, []string{"model.remote.api_key_env names FLEET_TEST_SURELY_UNSET_KEY, which is not set (line 5)"}},
		{"teacher always without base_url", "model:\n  teacher:\n    always: true\n", nil, []string{"model.teacher.always needs model.teacher.base_url"}},
		{"teacher without model", "model:\n  teacher:\n    base_url: http://h/v1\n", nil, []string{"model.teacher.model is required with model.teacher.base_url"}},
		{"teacher bad url", "model:\n  teacher:\n    base_url: h:8080\n    model: m\n", nil, []string{`model.teacher.base_url must be an http:// or https:// URL, got "h:8080" (line 3)`}},
		{"teacher key env unset", "model:\n  teacher:\n    base_url: http://h/v1\n    model: m\n    api_key_env: FLEET_TEST_SURELY_UNSET_KEY\n", nil, []string{"model.teacher.api_key_env names FLEET_TEST_SURELY_UNSET_KEY, which is not set (line 5)"}},
		{"teacher retries", "", []string{"FLEET_MODEL_TEACHER_BASE_URL", "http://h/v1", "FLEET_MODEL_TEACHER_MODEL", "m", "FLEET_MODEL_TEACHER_MAX_RETRIES", "-1"}, []string{"model.teacher.max_retries must be >= 0, got -1 (set by FLEET_MODEL_TEACHER_MAX_RETRIES)"}},
		{"prompt log off llama", "model:\n  backend: remote\n  remote:\n    base_url: http://h/v1\n  prompt_log: p.jsonl\n", nil, []string{"model.prompt_log is only written by model.backend: llama, got remote (line 5)"}},
		{"unknown backend", "model:\n  backend: onnx\n", nil, []string{`model.backend must be llama, remote, scripted or expert, got "onnx" (line 2)`}},
		{"scripted without script", "model:\n  backend: scripted\n", nil, []string{"model.scripted.script is required with model.backend: scripted"}},
		{"unknown key", "nats:\n  tsl:\n    ca: x\n", nil, []string{`unknown key "tsl" in nats (known: connect_retry_for, creds, embedded, nkey_seed, password, tls, token, url, user) (line 2)`}},
		{"unknown section", "workers:\n  slots: 2\n", nil, []string{`unknown key "workers" in top level`}},
		{"duration not a string", "queue:\n  ack_wait: 30\n", nil, []string{`queue.ack_wait must be a duration such as "30s" or "1m30s", got "30" (line 2)`}},
		{"bad bool", "model:\n  strict: maybe\n", nil, []string{`model.strict must be true or false, got "maybe" (line 2)`}},
		{"bad byte size", "monty:\n  memory_limit: lots\n", nil, []string{`monty.memory_limit must be a byte size: "lots" is not a byte size`}},
		{"list expected", "queue:\n  backoff: 1s\n", nil, []string{`queue.backoff must be a list, got string "1s" (line 2)`}},
		{"list item", "queue:\n  backoff: [1s, soon]\n", nil, []string{`queue.backoff[1] must be a duration such as "30s" or "1m30s", got "soon" (line 2)`}},
		{"section not a mapping", "loop: 5\n", nil, []string{`loop must be a mapping, got int 5 (line 1)`}},
		{"leaf not a value", "worker:\n  slots: {a: 1}\n", nil, []string{"worker.slots must be a single value, got a mapping (line 2)"}},
		{"key twice", "worker:\n  slots: 1\n  slots: 2\n", nil, []string{"worker.slots is set twice (line 3)"}},
		{"not yaml", "worker: [\n", nil, []string{"not valid YAML: "}},
		{"two documents", "worker: {}\n---\nloop: {}\n", nil, []string{"file holds more than one YAML document (line 2)"}},
		{"heartbeat too slow", "queue:\n  ack_wait: 10s\n  heartbeat_every: 10s\n", nil, []string{"queue.heartbeat_every must be less than queue.ack_wait (10s), got 10s (line 3)"}},
		{"ack wait tiny", "queue:\n  ack_wait: 10ms\n", nil, []string{"queue.ack_wait must be >= 1s, got 10ms (line 2)"}},
		{"backoff zero", "queue:\n  backoff: [1s, 0s]\n", nil, []string{"queue.backoff[1] must be > 0, got 0s"}},
		{"auth conflicts", "nats:\n  url: nats://h:4222\n  token: t\n  user: u\n  password: p\n", nil, []string{"nats.user conflicts with nats.token: use one of creds, nkey_seed, token, user+password (line 4)"}},
		{"password without user", "nats:\n  url: nats://h:4222\n  password: p\n", nil, []string{"nats.user must be set with nats.password"}},
		{"creds missing", "nats:\n  url: nats://h:4222\n  creds: /nope/x.creds\n", nil, []string{"nats.creds names a file that cannot be read"}},
		{"auth with embedded", "nats:\n  token: t\n", nil, []string{"nats.token is set but nats.url is empty: the embedded server takes no client credentials or TLS; set nats.url to connect to a server (line 2)"}},
		{"bad url scheme", "nats:\n  url: http://h:4222\n", nil, []string{`nats.url must use nats://, tls://, ws:// or wss://, got "http://h:4222" (line 2)`}},
		{"bad listen", "nats:\n  embedded:\n    listen: localhost\n", nil, []string{`nats.embedded.listen must be host:port, got "localhost" (line 3)`}},
		{"bad metrics listen", "worker:\n  metrics_listen: :99999\n", nil, []string{`worker.metrics_listen has an invalid port in ":99999" (line 2)`}},
		{"bad console listen", "worker:\n  console_listen: nohost\n", nil, []string{`worker.console_listen must be host:port, got "nohost" (line 2)`}},
		{"console on the metrics address", "worker:\n  metrics_listen: 127.0.0.1:9090\n  console_listen: 127.0.0.1:9090\n", nil, []string{`worker.console_listen is worker.metrics_listen's address too`}},
		{"negative presence", "worker:\n  presence_every: -1s\n", nil, []string{`worker.presence_every must not be negative`}},
		{"bad operation", "worker:\n  operations: [lint, a.b]\n", nil, []string{`worker.operations[1] must be 1-64 of A-Z a-z 0-9 _ -, got "a.b"`}},
		{"total below step", "loop:\n  step_timeout: 2m\n  total_timeout: 1m\n", nil, []string{"loop.total_timeout must be >= loop.step_timeout (2m0s), got 1m0s (line 3)"}},
		{"calls per turn zero", "loop:\n  max_tool_calls_per_turn: 0\n", nil, []string{"loop.max_tool_calls_per_turn must be >= 1 or -1 (no cap), got 0 (line 2)"}},
		{"budgets and context", "loop:\n  arg_errors_per_tool: -2\n  arg_errors: -5\n  context_tokens: -1\n", nil, []string{
			"loop.arg_errors_per_tool must be >= 0 (0 = default) or -1 (no limit), got -2 (line 2)",
			"loop.arg_errors must be >= 0 (0 = default) or -1 (no cap), got -5 (line 3)",
			"loop.context_tokens must be >= 0, got -1 (line 4)"}},
		{"sampling ranges", "model:\n  top_p: 1.5\n  temperature: -1\n  max_tokens: 5000\n", nil, []string{
			"model.top_p must be between 0 and 1, got 1.5 (line 2)",
			"model.temperature must be >= 0, got -1 (line 3)",
			"model.max_tokens must be less than model.context_size (4096), got 5000 (line 4)",
		}},
		{"monty", "monty:\n  max_runs: 0\n  memory_limit: 0\n  timeout: 0s\n", nil, []string{
			"monty.max_runs must be >= 1, got 0 (line 2)",
			"monty.memory_limit must be > 0, got 0 (line 3)",
			"monty.timeout must be > 0, got 0s (line 4)",
		}},
		{"transcripts too short", "queue:\n  results_max_age: 48h\n  transcripts_max_age: 24h\n", nil, []string{"queue.transcripts_max_age must be >= queue.results_max_age (48h0m0s), got 24h0m0s (line 3)"}},
		{"transcripts zero", "queue:\n  transcripts_max_age: 0s\n", nil, []string{"queue.transcripts_max_age must be > 0, got 0s (line 2)"}},
		{"negative unserved_after", "queue:\n  unserved_after: -1s\n", nil, []string{"queue.unserved_after must be >= 0 (0 = never), got -1s (line 2)"}},
		{"zero priority_streak", "queue:\n  priority_streak: 0\n", nil, []string{"queue.priority_streak must be 1..10000, got 0 (line 2)"}},
		{"priority_streak from env", "", []string{"FLEET_QUEUE_PRIORITY_STREAK", "20000"}, []string{"queue.priority_streak must be 1..10000, got 20000 (set by FLEET_QUEUE_PRIORITY_STREAK)"}},
		{"negative connect retry", "nats:\n  url: nats://h:4222\n  connect_retry_for: -1s\n", nil, []string{
			"nats.connect_retry_for must be >= 0 (0 = a single try), got -1s (line 3)"}},
		{"removed keys in the file", "queue:\n  stream_prefix: FLEET\nmodel:\n  threads: 1\n", nil, []string{
			"queue.stream_prefix was removed: the stream and bucket names are fixed by the protocol (FLEET_RUNS, FLEET_RESULTS, " +
				"FLEET_DLQ, FLEET_ADVISORIES and fleet_jobs, docs/PROTOCOL.md §3), and only the default FLEET was ever accepted; delete the key (line 2)",
			"model.threads was removed: llama.cpp computes each slot on one thread, and a worker runs one slot per core (worker.slots); delete the key (line 4)"}},
		{"removed keys in the environment", "", []string{"FLEET_MODEL_THREADS", "4", "FLEET_QUEUE_STREAM_PREFIX", " "}, []string{
			"model.threads was removed: llama.cpp computes each slot on one thread, and a worker runs one slot per core (worker.slots); delete the key (set by FLEET_MODEL_THREADS)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := ""
			if tc.yaml != "" {
				path = writeFile(t, tc.yaml)
			}
			c, err := load(path, env(tc.env...))
			if err == nil {
				t.Fatalf("accepted: %+v", c)
			}
			if c != nil {
				t.Error("config returned with an error")
			}
			var ve *ValidationError
			if !errors.Is(err, ErrInvalidConfig) || !errors.As(err, &ve) {
				t.Fatalf("not a *ValidationError: %#v", err)
			}
			prefix := "config: "
			if path != "" {
				prefix = "config " + path + ": "
			}
			msg := err.Error()
			for _, w := range tc.want {
				if !strings.Contains(msg, prefix+w) {
					t.Errorf("error lacks %q:\n%s", prefix+w, msg)
				}
			}
			if len(ve.Problems) != len(tc.want) {
				t.Errorf("%d problems, want %d:\n%s", len(ve.Problems), len(tc.want), msg)
			}
		})
	}
}

func TestValidateInCode(t *testing.T) {
	t.Parallel()
	c := Default()
	c.Queue.AckWait = 9 * time.Second
	c.Worker.Slots = 4
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.Queue.HeartbeatEvery != 3*time.Second || c.Monty.Pool != 4 {
		t.Errorf("derived: heartbeat %s pool %d", c.Queue.HeartbeatEvery, c.Monty.Pool)
	}
	c.Worker.Slots = 0
	c.Model.Backend = ""
	err := c.Validate()
	if err == nil || err.Error() != "config: worker.slots must be >= 1, got 0\nconfig: model.backend must be llama, remote, scripted or expert, got \"\"" {
		t.Errorf("Validate = %v", err)
	}
}

func TestLoadMissingFile(t *testing.T) {
	t.Parallel()
	_, err := load(filepath.Join(t.TempDir(), "nope.yaml"), noEnv)
	if !errors.Is(err, os.ErrNotExist) || errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("err = %v", err)
	}
}

func TestEmptyFile(t *testing.T) {
	t.Parallel()
	c, err := load(writeFile(t, "# only a comment\n"), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	d, _ := load("", noEnv)
	if !reflect.DeepEqual(c, d) {
		t.Errorf("empty file differs from defaults")
	}
}

// The example file lists every key, with the default value, and loads to
// exactly the defaults.
func TestExampleFile(t *testing.T) {
	t.Parallel()
	c, err := load("fleet.example.yaml", noEnv)
	if err != nil {
		t.Fatal(err)
	}
	d, _ := load("", noEnv)
	if !reflect.DeepEqual(c, d) {
		t.Errorf("fleet.example.yaml does not match the defaults:\n%+v\n%+v", c, d)
	}
	data, err := os.ReadFile("fleet.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range Keys() {
		leafKey := k[strings.LastIndex(k, ".")+1:]
		if !strings.Contains(string(data), " "+leafKey+":") {
			t.Errorf("fleet.example.yaml lacks %s", k)
		}
	}
}

// docs/CONFIG.md documents every key and its environment variable.
func TestConfigDoc(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join("..", "docs", "CONFIG.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range Keys() {
		if !strings.Contains(string(data), "`"+k+"`") || !strings.Contains(string(data), "`"+EnvVar(k)+"`") {
			t.Errorf("docs/CONFIG.md lacks %s or %s", k, EnvVar(k))
		}
	}
}

func TestKeysAndEnvNamesUnique(t *testing.T) {
	t.Parallel()
	seen := map[string]string{}
	for _, k := range Keys() {
		e := EnvVar(k)
		if prev, dup := seen[e]; dup {
			t.Errorf("%s and %s share %s", prev, k, e)
		}
		seen[e] = k
	}
	if len(seen) < 50 {
		t.Errorf("only %d keys", len(seen))
	}
	if EnvVar("nats.tls.ca") != "FLEET_NATS_TLS_CA" || EnvVar("worker.slots") != "FLEET_WORKER_SLOTS" {
		t.Error("EnvVar naming")
	}
}

func TestByteSize(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want ByteSize
	}{
		{"0", 0}, {"1048576", MiB}, {"512MiB", 512 * MiB}, {"4GiB", 4 * GiB}, {"1KiB", KiB}, {"2TiB", 2 * TiB},
		{"100MB", 100e6}, {"1.5GB", 1.5e9}, {"1.5 KiB", 1536}, {"10B", 10}, {" 7 ", 7}, {"-1", -1},
	} {
		got, err := ParseByteSize(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseByteSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "MiB", "1XB", "lots", "1e400GB", "0x10MiB", "NaNB", "1 2MB"} {
		if _, err := ParseByteSize(bad); err == nil {
			t.Errorf("ParseByteSize(%q) accepted", bad)
		}
	}
	for _, tc := range []struct {
		in   ByteSize
		want string
	}{{256 * MiB, "256MiB"}, {4 * GiB, "4GiB"}, {1536, "1536B"}, {0, "0B"}, {3 * KiB, "3KiB"}, {TiB, "1TiB"}} {
		if got := tc.in.String(); got != tc.want {
			t.Errorf("%d.String() = %q, want %q", int64(tc.in), got, tc.want)
		}
		if back, err := ParseByteSize(tc.in.String()); err != nil || back != tc.in {
			t.Errorf("round trip of %d: %d, %v", int64(tc.in), back, err)
		}
	}
}

func FuzzParseByteSize(f *testing.F) {
	for _, s := range []string{"0", "512MiB", "1.5GB", "-1", "1e3KB", "9223372036854775807", "9999999999TiB"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, err := ParseByteSize(s)
		if err != nil {
			return
		}
		// A parsed size formats to a string that parses back to itself.
		if back, err := ParseByteSize(b.String()); err != nil || back != b {
			t.Fatalf("%q -> %d -> %q -> %d, %v", s, int64(b), b.String(), int64(back), err)
		}
	})
}
