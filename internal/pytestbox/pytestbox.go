// Package pytestbox runs pytest on a copy of a job's workspace in a
// bubblewrap sandbox (Debian's bubblewrap): no network (every namespace
// unshared), no host files but /usr read-only and the copy, a fresh /tmp,
// and limits on wall time, CPU time, memory and processes (prlimit). It
// serves the test agent's run_tests and try_calls tools (docs/TOOLS.md
// §4.7, §4.8).
package pytestbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// ErrUnavailable is wrapped when bubblewrap, prlimit or python3 is missing.
var ErrUnavailable = errors.New("pytestbox: unavailable")

// Config sets the sandbox's tools and limits. Zero values take the
// defaults.
type Config struct {
	// Python is the interpreter inside the sandbox; default
	// /usr/bin/python3 (Debian's, with python3-pytest).
	Python string
	// Bwrap and Prlimit are the sandbox's tools; default found on PATH.
	Bwrap   string
	Prlimit string
	// Timeout is the wall-time limit of one run; default 60 s.
	Timeout time.Duration
	// CPUSeconds limits the CPU time; default 60.
	CPUSeconds int
	// MemoryBytes limits the address space; default 1 GiB.
	MemoryBytes int64
	// Processes limits the processes of the sandbox's user; default 64.
	Processes int
	// MaxOutput caps the output returned; default 8 KiB (its end is kept).
	MaxOutput int
	// MaxFiles and MaxBytes cap the copied workspace; default 2000 files,
	// 20 MiB.
	MaxFiles int
	MaxBytes int64
}

func (c *Config) defaults() error {
	if c.Python == "" {
		c.Python = "/usr/bin/python3"
	}
	var err error
	if c.Bwrap == "" {
		if c.Bwrap, err = exec.LookPath("bwrap"); err != nil {
			return fmt.Errorf("%w: bwrap not found (apt-get install -y bubblewrap)", ErrUnavailable)
		}
	}
	if c.Prlimit == "" {
		if c.Prlimit, err = exec.LookPath("prlimit"); err != nil {
			return fmt.Errorf("%w: prlimit not found (apt-get install -y util-linux)", ErrUnavailable)
		}
	}
	if _, err := os.Stat(c.Python); err != nil {
		return fmt.Errorf("%w: %s: %v (apt-get install -y python3 python3-pytest)", ErrUnavailable, c.Python, err)
	}
	if c.Timeout <= 0 {
		c.Timeout = time.Minute
	}
	if c.CPUSeconds <= 0 {
		c.CPUSeconds = 60
	}
	if c.MemoryBytes <= 0 {
		c.MemoryBytes = 1 << 30
	}
	if c.Processes <= 0 {
		c.Processes = 64
	}
	if c.MaxOutput <= 0 {
		c.MaxOutput = 8 << 10
	}
	if c.MaxFiles <= 0 {
		c.MaxFiles = 2000
	}
	if c.MaxBytes <= 0 {
		c.MaxBytes = 20 << 20
	}
	return nil
}

// Box runs pytest in the sandbox.
type Box struct{ cfg Config }

// New checks that the sandbox's tools are there.
func New(cfg Config) (*Box, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	return &Box{cfg: cfg}, nil
}

// Result is one pytest run.
type Result struct {
	ExitCode int  `json:"exit_code"`
	TimedOut bool `json:"timed_out"`
	Passed   int  `json:"passed"`
	Failed   int  `json:"failed"`
	Errors   int  `json:"errors"`
	Skipped  int  `json:"skipped"`
	// Output is the end of pytest's output.
	Output string `json:"output"`
}

var countRe = regexp.MustCompile(`(\d+) (passed|failed|errors?|skipped)`)

// Run copies files (workspace path -> content) into a private folder and
// runs `python3 -m pytest -q paths...` there in the sandbox. An error is
// returned only when the sandbox cannot run; test failures are a Result.
func (b *Box) Run(ctx context.Context, files map[string]string, paths []string) (*Result, error) {
	dir, err := b.copyFiles(files)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	rctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	defer cancel()
	argv := append([]string{"-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts="}, paths...)
	cmd := b.command(rctx, dir, "0", argv...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	res := &Result{}
	var ee *exec.ExitError
	switch {
	case rctx.Err() != nil && ctx.Err() == nil:
		res.TimedOut, res.ExitCode = true, -1
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case errors.As(err, &ee):
		res.ExitCode = ee.ExitCode()
	case err != nil:
		return nil, fmt.Errorf("pytestbox: %w", err)
	}
	text := out.String()
	for _, m := range countRe.FindAllStringSubmatch(lastLine(text), -1) {
		n, _ := strconv.Atoi(m[1])
		switch m[2] {
		case "passed":
			res.Passed = n
		case "failed":
			res.Failed = n
		case "skipped":
			res.Skipped = n
		default:
			res.Errors = n
		}
	}
	if len(text) > b.cfg.MaxOutput {
		text = "..." + text[len(text)-b.cfg.MaxOutput:]
	}
	if res.TimedOut {
		text += fmt.Sprintf("\n(stopped after %s)", b.cfg.Timeout)
	}
	res.Output = text
	return res, nil
}

// copyFiles writes files (workspace path -> content) into a new private
// folder, within the configured limits; the caller removes it.
func (b *Box) copyFiles(files map[string]string) (string, error) {
	if len(files) > b.cfg.MaxFiles {
		return "", fmt.Errorf("pytestbox: %d files, the limit is %d", len(files), b.cfg.MaxFiles)
	}
	dir, err := os.MkdirTemp("", "fleet-pytest-")
	if err != nil {
		return "", err
	}
	var total int64
	for p, text := range files {
		total += int64(len(text))
		clean := filepath.Clean(filepath.FromSlash(p))
		if total > b.cfg.MaxBytes || filepath.IsAbs(clean) || strings.HasPrefix(clean, "..") {
			os.RemoveAll(dir)
			return "", fmt.Errorf("pytestbox: refused workspace file %q (or over %d bytes)", p, b.cfg.MaxBytes)
		}
		full := filepath.Join(dir, clean)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			os.RemoveAll(dir)
			return "", err
		}
		if err := os.WriteFile(full, []byte(text), 0o644); err != nil {
			os.RemoveAll(dir)
			return "", err
		}
	}
	return dir, nil
}

// command is `python3 -B argv...` in the sandbox, with dir as its /work
// (the working directory), PYTHONHASHSEED=hashSeed and the configured
// limits.
func (b *Box) command(ctx context.Context, dir, hashSeed string, argv ...string) *exec.Cmd {
	args := []string{
		"--cpu=" + strconv.Itoa(b.cfg.CPUSeconds), "--as=" + strconv.FormatInt(b.cfg.MemoryBytes, 10),
		"--nproc=" + strconv.Itoa(b.cfg.Processes), "--",
		b.cfg.Bwrap, "--unshare-all", "--die-with-parent", "--new-session",
		"--ro-bind", "/usr", "/usr", "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
		"--symlink", "usr/bin", "/bin", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
		"--bind", dir, "/work", "--chdir", "/work", "--clearenv",
		"--setenv", "HOME", "/work", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "PYTHONDONTWRITEBYTECODE", "1",
		"--setenv", "PYTHONHASHSEED", hashSeed, "--setenv", "LC_ALL", "C.UTF-8",
		b.cfg.Python, "-B",
	}
	cmd := exec.CommandContext(ctx, b.cfg.Prlimit, append(args, argv...)...)
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
