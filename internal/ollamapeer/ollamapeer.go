// Package ollamapeer runs ollama, built from the same Go module fleet takes
// llama.cpp from (github.com/ollama/ollama v0.17.4), as a peer for tests and
// benchmarks: `make ollama-peer` builds the binary into .build/ollama and
// names it in FLEET_OLLAMA_BIN; Start serves it on a loopback port with its
// own model store, and Create registers a GGUF with ollama's FunctionGemma
// renderer and parser (Modelfile RENDERER/PARSER functiongemma).
package ollamapeer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// ErrUnavailable is returned by Binary when no ollama binary was built; its
// message says why.
var ErrUnavailable = errors.New("ollamapeer: no ollama binary")

// Binary returns the ollama binary named by FLEET_OLLAMA_BIN. When the
// build failed, `make ollama-peer` leaves the reason next to the binary's
// path (<bin>.unavailable) and Binary returns it wrapped in ErrUnavailable.
func Binary() (string, error) {
	p := os.Getenv("FLEET_OLLAMA_BIN")
	if p == "" {
		return "", fmt.Errorf("%w: FLEET_OLLAMA_BIN is unset (make ollama-peer builds it; make test sets it)", ErrUnavailable)
	}
	if _, err := os.Stat(p); err != nil {
		why, _ := os.ReadFile(p + ".unavailable")
		return "", fmt.Errorf("%w: %s is missing: %s", ErrUnavailable, p, bytes.TrimSpace(why))
	}
	return p, nil
}

// Server is a running `ollama serve`.
type Server struct {
	// URL is the server's root, http://127.0.0.1:PORT.
	URL  string
	bin  string
	env  []string
	cmd  *exec.Cmd
	log  *os.File
	done chan error
}

// Start runs `ollama serve` on a free loopback port with its model store,
// home and log under dir, and waits until it answers. Stop ends it. It
// serves one request at a time (OLLAMA_NUM_PARALLEL=1).
func Start(ctx context.Context, bin, dir string) (*Server, error) {
	return StartParallel(ctx, bin, dir, 1)
}

// StartParallel is Start with OLLAMA_NUM_PARALLEL=parallel: ollama's runner
// then decodes up to that many requests together in one batch.
func StartParallel(ctx context.Context, bin, dir string, parallel int) (*Server, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()
	logf, err := os.Create(filepath.Join(dir, "ollama.log"))
	if err != nil {
		return nil, err
	}
	s := &Server{URL: "http://" + addr, bin: bin, log: logf, done: make(chan error, 1)}
	s.env = append(os.Environ(), "OLLAMA_HOST="+addr, "OLLAMA_MODELS="+filepath.Join(dir, "models"),
		"HOME="+dir, "OLLAMA_LIBRARY_PATH=", fmt.Sprintf("OLLAMA_NUM_PARALLEL=%d", max(parallel, 1)), "OLLAMA_MAX_LOADED_MODELS=1",
		"OLLAMA_KEEP_ALIVE=1h", "OLLAMA_NOPRUNE=1",
		// Debug level logs, once per request, how much of the prompt came
		// from the cache (PromptLoads); nothing per token or per batch.
		"OLLAMA_DEBUG=1")
	s.cmd = exec.Command(bin, "serve")
	s.cmd.Env = s.env
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	if err := s.cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	go func() { s.done <- s.cmd.Wait() }()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/api/version", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		select {
		case err := <-s.done:
			s.done <- err
			return nil, fmt.Errorf("ollamapeer: ollama serve exited: %v (log %s)", err, logf.Name())
		case <-ctx.Done():
			s.Stop()
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
}

// Create registers gguf as model name with ollama's FunctionGemma renderer
// and parser, greedy decoding and the given number of threads.
func (s *Server) Create(ctx context.Context, name, gguf string, threads int) error {
	mf := fmt.Sprintf("FROM %s\nRENDERER functiongemma\nPARSER functiongemma\nPARAMETER temperature 0\nPARAMETER num_thread %d\nPARAMETER num_ctx 4096\n", gguf, threads)
	path := filepath.Join(filepath.Dir(s.log.Name()), name+".Modelfile")
	if err := os.WriteFile(path, []byte(mf), 0o644); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, s.bin, "create", name, "-f", path)
	cmd.Env = s.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("ollamapeer: ollama create %s: %v: %s", name, err, lastLine(out))
	}
	return nil
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}

// PromptLoad is what ollama's runner logged when it took a request's
// prompt: its length in tokens, how many of them it kept from its prompt
// cache and how many it computes. The API's prompt_eval_count is Prompt,
// cached tokens included, so prompt_eval_count / prompt_eval_duration
// overstates the rate by Used/Prompt; Remaining is the work done.
type PromptLoad struct {
	Prompt, Used, Remaining int
	// DoubleBOS: ollama's tokenizer prepended <bos> to a prompt that
	// already began with one (its FunctionGemma renderer writes it), so
	// the model saw two.
	DoubleBOS bool
	// Received is when the server handed the rendered prompt to the
	// runner ("completion request"; the n-th such line is paired with the
	// n-th load) and Loaded when the runner took it after tokenizing it
	// (and waiting for a free sequence, if none was). Under concurrency
	// the pairing may cross requests, but the sum of Loaded - Received
	// over all loads is exact. Zero when the log line has no time.
	Received, Loaded time.Time
}

// PromptLoads parses the server's log (OLLAMA_DEBUG=1, which Start sets)
// for every prompt its runner took, oldest first.
func (s *Server) PromptLoads() ([]PromptLoad, error) {
	b, err := os.ReadFile(s.log.Name())
	if err != nil {
		return nil, err
	}
	return ParsePromptLoads(string(b))
}

// ParsePromptLoads reads PromptLoads from ollama's log text: a
// `msg="loading cache slot"` line per request, preceded by
// `msg="adding bos token to prompt which already has it"` when ollama
// doubled the <bos>. A cache line without its numbers is an error.
func ParsePromptLoads(log string) ([]PromptLoad, error) {
	var out []PromptLoad
	var received []time.Time
	double := false
	for line := range strings.Lines(log) {
		switch {
		case strings.Contains(line, `msg="adding bos token to prompt which already has it"`):
			double = true
		case strings.Contains(line, `msg="completion request"`):
			received = append(received, logTime(line))
		case strings.Contains(line, `msg="loading cache slot"`):
			l := PromptLoad{Loaded: logTime(line)}
			if len(received) > 0 {
				l.Received, received = received[0], received[1:]
			}
			for _, f := range []struct {
				key string
				v   *int
			}{{"prompt=", &l.Prompt}, {"used=", &l.Used}, {"remaining=", &l.Remaining}} {
				i := strings.Index(line, " "+f.key)
				if i < 0 {
					return nil, fmt.Errorf("ollamapeer: log line without %s: %q", f.key, strings.TrimSpace(line))
				}
				if _, err := fmt.Sscanf(line[i+1+len(f.key):], "%d", f.v); err != nil {
					return nil, fmt.Errorf("ollamapeer: log line %q: %s%v", strings.TrimSpace(line), f.key, err)
				}
			}
			l.DoubleBOS, double = double, false
			out = append(out, l)
		}
	}
	return out, nil
}

// CPUTime is the CPU time (user + system) the server and every process
// under it (its model runner) have used so far, read from /proc; 0 where
// there is no /proc. Benchmarks divide it by the jobs served, which stays
// comparable on a machine shared with other work, unlike wall time.
func (s *Server) CPUTime() time.Duration {
	if s.cmd.Process == nil {
		return 0
	}
	return procTreeCPU(s.cmd.Process.Pid)
}

// procTreeCPU sums utime and stime of pid and its descendants.
func procTreeCPU(root int) time.Duration {
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	type stat struct{ ppid, ticks int }
	procs := map[int]stat{}
	for _, d := range dirs {
		var pid int
		if _, err := fmt.Sscanf(d.Name(), "%d", &pid); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", d.Name(), "stat"))
		if err != nil {
			continue
		}
		// The command name (field 2) may hold spaces: fields after the
		// last ')' are state, ppid, ...; utime and stime are fields 14
		// and 15 of the whole line.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 13 {
			continue
		}
		var st stat
		var ut, stt int
		fmt.Sscanf(f[1], "%d", &st.ppid)
		fmt.Sscanf(f[11], "%d", &ut)
		fmt.Sscanf(f[12], "%d", &stt)
		st.ticks = ut + stt
		procs[pid] = st
	}
	var total int
	var walk func(pid int)
	seen := map[int]bool{}
	walk = func(pid int) {
		if seen[pid] {
			return
		}
		seen[pid] = true
		total += procs[pid].ticks
		for c, st := range procs {
			if st.ppid == pid {
				walk(c)
			}
		}
	}
	walk(root)
	// USER_HZ is 100 on Linux for every architecture fleet builds for.
	return time.Duration(total) * (time.Second / 100)
}

// logTime reads the time= field that begins an ollama log line (zero if
// there is none).
func logTime(line string) time.Time {
	v, ok := strings.CutPrefix(line, "time=")
	if !ok {
		return time.Time{}
	}
	if i := strings.IndexByte(v, ' '); i > 0 {
		v = v[:i]
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}
	}
	return t
}

// LogPath is the server's log file.
func (s *Server) LogPath() string { return s.log.Name() }

// Stop interrupts the server and waits for it.
func (s *Server) Stop() {
	if s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(os.Interrupt)
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.done
		}
	}
	s.log.Close()
}
