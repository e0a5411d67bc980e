package monty

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// child is one `monty subprocess` process. Exactly one goroutine drives it
// at a time (the pool hands it out exclusively); kill may be called from any
// goroutine.
type child struct {
	cmd    *exec.Cmd
	pid    int
	stdin  io.WriteCloser
	stdout *bufio.Reader
	exited chan struct{}
	log    *slog.Logger

	frameLimit uint32
	runs       int
	session    bool // configured, not fed yet: ready for a Feed

	killOnce sync.Once
	wbuf     []byte // frame scratch
	mbuf     []byte // message scratch
	rbuf     []byte // read scratch
}

// spawn starts a child with an empty environment in its own process group.
func spawn(binary string, log *slog.Logger, frameLimit uint32) (*child, error) {
	cmd := exec.Command(binary, "subprocess")
	cmd.Env = []string{}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// Our own stdin pipe, to size it: a run started from a snapshot
	// sends the state (tens of KiB) in one frame, which then fits the
	// pipe in one write instead of waiting for the child to drain 64 KiB.
	stdinR, stdin, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	growPipe(stdin, stdinPipeBytes)
	cmd.Stdin = stdinR
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		stdinR.Close()
		stdin.Close()
		return nil, err
	}
	sw := &stderrLog{log: log}
	cmd.Stderr = sw
	err = cmd.Start()
	stdinR.Close() // the child has its copy
	if err != nil {
		stdin.Close()
		return nil, fmt.Errorf("monty: start %s: %w", binary, err)
	}
	c := &child{
		cmd:        cmd,
		pid:        cmd.Process.Pid,
		stdin:      stdin,
		stdout:     bufio.NewReaderSize(stdout, 64<<10),
		exited:     make(chan struct{}),
		frameLimit: frameLimit,
	}
	c.log = log.With("monty_pid", c.pid)
	sw.mu.Lock()
	sw.log = c.log
	sw.mu.Unlock()
	go func() {
		err := cmd.Wait()
		sw.flush()
		if err != nil {
			c.log.Debug("monty process exited", "err", err)
		}
		close(c.exited)
	}()
	return c, nil
}

// stdinPipeBytes is the capacity asked for the child's stdin pipe (Linux
// caps it at /proc/sys/fs/pipe-max-size, 1 MiB by default).
const stdinPipeBytes = 1 << 20

// growPipe asks for a pipe of n bytes; failing that, the pipe keeps its
// size (writes then just take more rounds).
func growPipe(f *os.File, n int) {
	const fSetPipeSz = 1031 // F_SETPIPE_SZ
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		_, _, _ = syscall.Syscall(syscall.SYS_FCNTL, fd, fSetPipeSz, uintptr(n))
	})
}

// kill SIGKILLs the child's process group. Safe to call more than once and
// concurrently.
func (c *child) kill() {
	c.killOnce.Do(func() {
		_ = syscall.Kill(-c.pid, syscall.SIGKILL)
		_ = c.stdin.Close()
	})
}

// close kills the child and waits until it is reaped.
func (c *child) close() {
	c.kill()
	<-c.exited
}

// send writes one ParentRequest built by enc into the message scratch.
func (c *child) send(enc func([]byte) []byte) error {
	c.mbuf = enc(c.mbuf[:0])
	var err error
	c.wbuf, err = writeFrame(c.stdin, c.wbuf, c.mbuf)
	if err != nil {
		return fmt.Errorf("%w: write: %v", ErrCrashed, err)
	}
	return nil
}

// next reads and decodes one ChildEvent.
func (c *child) next() (childEvent, error) {
	body, err := readFrame(c.stdout, c.rbuf, c.frameLimit)
	if err != nil {
		if errors.Is(err, io.EOF) {
			return childEvent{}, fmt.Errorf("%w: process exited", ErrCrashed)
		}
		return childEvent{}, fmt.Errorf("%w: %w", ErrCrashed, err)
	}
	c.rbuf = body[:0]
	ev, err := decodeChildEvent(body)
	if err != nil {
		return childEvent{}, fmt.Errorf("%w: undecodable event: %v", ErrCrashed, err)
	}
	return ev, nil
}

// roundTrip sends one request and reads events up to the turn-ending one,
// passing Print text to onPrint (which may be nil).
func (c *child) roundTrip(enc func([]byte) []byte, onPrint func(string)) (childEvent, error) {
	if err := c.send(enc); err != nil {
		return childEvent{}, err
	}
	for {
		ev, err := c.next()
		if err != nil {
			return ev, err
		}
		if ev.kind != evPrint {
			if ev.kind == evFatalError {
				return ev, fmt.Errorf("%w: fatal error: %s", ErrCrashed, ev.message)
			}
			return ev, nil
		}
		if onPrint != nil {
			onPrint(ev.text)
		}
	}
}

// expectOK runs a request whose only good answer is Ok.
func (c *child) expectOK(what string, enc func([]byte) []byte) error {
	ev, err := c.roundTrip(enc, nil)
	if err != nil {
		return err
	}
	if ev.kind != evOk {
		return fmt.Errorf("%w: %s: %s", ErrProtocol, what, describeEvent(ev))
	}
	return nil
}

// configure opens a session with the given limits.
func (c *child) configure(l *limits) error {
	err := c.expectOK("configure", func(b []byte) []byte {
		return encodeConfigure(b, configureMsg{scriptName: scriptName, limits: l, montyVersion: Version})
	})
	c.session = err == nil
	return err
}

// scriptName is the Configure script name of every session (tracebacks
// name the .pym instead, see run.scriptError).
const scriptName = "tool.pym"

// reset drops the session.
func (c *child) reset() error {
	c.session = false
	return c.expectOK("reset", func(b []byte) []byte { return encodeEmpty(b, reqReset) })
}

// selfTest checks that the process speaks the pinned protocol: Configure,
// Feed("1+1") → Complete 2, Reset. It leaves the child unconfigured.
func (c *child) selfTest() error {
	if err := c.configure(nil); err != nil {
		return err
	}
	ev, err := c.roundTrip(func(b []byte) []byte { return encodeFeed(b, "1 + 1") }, nil)
	if err != nil {
		return err
	}
	if ev.kind != evComplete {
		return fmt.Errorf("self-test: Feed(1 + 1) answered %s", describeEvent(ev))
	}
	j, err := valueToJSON(nil, ev.value)
	if err != nil || string(j) != "2" {
		return fmt.Errorf("self-test: Feed(1 + 1) returned %s (%v), want 2", j, err)
	}
	return c.reset()
}

// describeEvent renders an event for error messages.
func describeEvent(ev childEvent) string {
	switch ev.kind {
	case evError:
		if ev.exc != nil {
			return "Error " + ev.exc.typ + ": " + ev.exc.message
		}
		return "Error"
	case evFatalError:
		return "FatalError: " + ev.message
	case evTypingError:
		return "TypingError: " + ev.message
	case evComplete:
		return "Complete"
	case evOk:
		return "Ok"
	case evFunctionCall:
		return "FunctionCall " + ev.name
	case evNameLookup:
		return "NameLookup " + ev.name
	case evOsCall:
		return fmt.Sprintf("OsCall %d", ev.osArm)
	case evResolveFutures:
		return fmt.Sprintf("ResolveFutures %v", ev.pending)
	}
	return fmt.Sprintf("event %d", ev.kind)
}

// binaryVersion runs `binary --version`.
func binaryVersion(ctx context.Context, binary string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "--version")
	cmd.Env = []string{}
	out, err := cmd.Output()
	return strings.TrimSpace(string(out)), err
}

// stderrLog forwards the child's stderr to the logger, one record per line.
type stderrLog struct {
	mu      sync.Mutex
	log     *slog.Logger
	partial []byte
}

const maxStderrLine = 4096

func (w *stderrLog) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			room := maxStderrLine - len(w.partial)
			w.partial = append(w.partial, p[:min(room, len(p))]...)
			break
		}
		w.partial = append(w.partial, p[:min(i, maxStderrLine-len(w.partial))]...)
		w.emit()
		p = p[i+1:]
	}
	return n, nil
}

func (w *stderrLog) emit() {
	if len(w.partial) > 0 {
		w.log.Warn("monty stderr", "line", string(w.partial))
	}
	w.partial = w.partial[:0]
}

func (w *stderrLog) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.emit()
}
