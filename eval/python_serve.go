package eval

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/agentfleet/fleet/internal/textcut"
)

// pyServer is one `evaltool.py serve` process: requests in on stdin, one
// JSON line each, answers out on stdout, one line each.
type pyServer struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
	stderr *textcut.Tail
	once   sync.Once
}

// pyAnswer is one serve answer: exactly one field is set.
type pyAnswer struct {
	OK      json.RawMessage `json:"ok"`
	Missing string          `json:"missing"`
	Error   string          `json:"error"`
}

// run runs one evaltool command with req as its JSON input and decodes its
// answer into resp, on an idle interpreter or a new one. A request that
// fails in transport (the interpreter died, ctx ended) retires its
// interpreter; an answer, even an error, gives it back.
func (p *Python) run(ctx context.Context, cmd string, req, resp any) error {
	line, err := json.Marshal(map[string]any{"cmd": cmd, "req": req})
	if err != nil {
		return err
	}
	s, err := p.get()
	if err != nil {
		return err
	}
	ans, err := s.ask(ctx, append(line, '\n'))
	if err != nil {
		s.stop()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("eval: evaltool %s: %v: %s", cmd, err, textcut.LastLines(s.stderr.String(), 6))
	}
	p.put(s)
	switch {
	case ans.Missing != "":
		return &ToolMissingError{Package: ans.Missing, Tool: strings.TrimPrefix(ans.Missing, "python3-")}
	case ans.Error != "":
		return fmt.Errorf("eval: evaltool %s: %s", cmd, textcut.LastLines(ans.Error, 6))
	}
	if err := json.Unmarshal(ans.OK, resp); err != nil {
		return fmt.Errorf("eval: evaltool %s: bad answer: %v", cmd, err)
	}
	return nil
}

// get takes an idle interpreter or starts one.
func (p *Python) get() (*pyServer, error) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		s := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return s, nil
	}
	p.mu.Unlock()
	dir, err := p.unpack()
	if err != nil {
		return nil, fmt.Errorf("eval: unpack evaltool: %w", err)
	}
	c := exec.Command(p.interpreter(), "-B", filepath.Join(dir, "evaltool.py"), "serve")
	c.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1", "PYTHONHASHSEED=0")
	s := &pyServer{cmd: c, stderr: &textcut.Tail{Max: 8 << 10}}
	c.Stderr = s.stderr
	if s.in, err = c.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := c.StdoutPipe()
	if err != nil {
		return nil, err
	}
	s.out = bufio.NewReaderSize(out, 64<<10)
	if err := c.Start(); err != nil {
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return nil, &ToolMissingError{Package: "python3", Tool: p.interpreter()}
		}
		return nil, fmt.Errorf("eval: start evaltool: %w", err)
	}
	return s, nil
}

// put gives an interpreter back, or stops it after Close.
func (p *Python) put(s *pyServer) {
	p.mu.Lock()
	if !p.closed {
		p.idle = append(p.idle, s)
		s = nil
	}
	p.mu.Unlock()
	if s != nil {
		s.stop()
	}
}

// ask sends one request line and reads its answer; ctx's end kills the
// process, which ends the read.
func (s *pyServer) ask(ctx context.Context, line []byte) (*pyAnswer, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, s.kill)
	defer stop()
	if _, err := s.in.Write(line); err != nil {
		return nil, err
	}
	b, err := s.out.ReadBytes('\n')
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = errors.New("the interpreter exited")
		}
		return nil, err
	}
	var a pyAnswer
	if err := json.Unmarshal(b, &a); err != nil {
		return nil, fmt.Errorf("bad answer line: %v", err)
	}
	if a.OK == nil && a.Missing == "" && a.Error == "" {
		return nil, errors.New("empty answer")
	}
	return &a, nil
}

func (s *pyServer) kill() {
	if s.cmd.Process != nil {
		s.cmd.Process.Kill()
	}
}

// stop ends the process: stdin closed (serve returns), killed if it has
// not exited within a second, and reaped.
func (s *pyServer) stop() {
	s.once.Do(func() {
		s.in.Close()
		t := time.AfterFunc(time.Second, s.kill)
		s.cmd.Wait()
		t.Stop()
	})
}
