package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/queue/wire"
)

// view shows a followed job: plain lines or JSON (printer), or live
// progress on a terminal (live).
type view interface {
	event(e *wire.Event)
	result(r *wire.AgentResult)
	// close removes any animation; the view is not used afterwards.
	close()
}

// plainView is a printer as a view.
type plainView struct{ *printer }

func (plainView) close() {}

// isTerminal reports whether w is a terminal that can take animation.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return false
	}
	return os.Getenv("TERM") != "dumb"
}

// useColor reports whether a terminal's output may be colored (NO_COLOR,
// https://no-color.org, turns it off).
func useColor() bool { return os.Getenv("NO_COLOR") == "" }

// newView picks the view for w: JSON lines, live progress on a terminal
// (unless noProgress), else plain lines.
func newView(w io.Writer, asJSON, noProgress bool) view {
	if !asJSON && !noProgress && isTerminal(w) {
		return newLive(w, useColor())
	}
	return plainView{newPrinter(w, asJSON)}
}

// live shows the job's event lines as they come, under them one progress
// line (github.com/schollz/progressbar): a spinner until the first turn,
// then a bar of the turns with "turn i/max", what runs now (the model, or
// the tool) and the elapsed time, refreshed every tick while nothing
// happens.
type live struct {
	mu    sync.Mutex
	term  io.Writer
	buf   bytes.Buffer
	p     *printer // writes into buf
	bar   *progressbar.ProgressBar
	color bool

	turn, max int
	doing     string
	attempt   int

	quit chan struct{}
	done chan struct{}
}

// liveTick is how often the progress line is redrawn when no event comes.
const liveTick = 100 * time.Millisecond

func newLive(w io.Writer, color bool) *live {
	l := &live{term: w, color: color, doing: "waiting for a worker", quit: make(chan struct{}), done: make(chan struct{})}
	l.p = newPrinter(&l.buf, false)
	l.p.color = color
	l.bar = progressbar.NewOptions(-1,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(l.describe()),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionSetPredictTime(false),
		progressbar.OptionSetWidth(20),
		progressbar.OptionThrottle(0),
		// No spinner goroutine of the library's own: the tick below
		// redraws under l.mu, so lines and the bar never interleave.
		progressbar.OptionSetSpinnerChangeInterval(0),
		progressbar.OptionSpinnerType(14),
		progressbar.OptionSetTheme(barTheme),
	)
	_ = l.bar.RenderBlank()
	go l.tick()
	return l
}

// barTheme is how enqueue's progress bars look.
var barTheme = progressbar.Theme{Saucer: "█", SaucerPadding: "░", BarStart: "▕", BarEnd: "▏"}

// newBar is a progress bar of max steps (-1: a spinner with a count) on a
// terminal w, in enqueue's look.
func newBar(w io.Writer, max int, desc string) *progressbar.ProgressBar {
	b := progressbar.NewOptions(max,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(desc),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionSetPredictTime(max > 0),
		progressbar.OptionShowCount(),
		progressbar.OptionSetWidth(20),
		progressbar.OptionThrottle(65*time.Millisecond),
		// No spinner goroutine of the library's own: Set redraws.
		progressbar.OptionSetSpinnerChangeInterval(0),
		progressbar.OptionSpinnerType(14),
		progressbar.OptionSetTheme(barTheme),
	)
	_ = b.RenderBlank()
	return b
}

func (l *live) describe() string {
	if l.turn == 0 {
		return l.doing
	}
	return fmt.Sprintf("turn %d/%d · %s", l.turn, l.max, l.doing)
}

func (l *live) tick() {
	defer close(l.done)
	t := time.NewTicker(liveTick)
	defer t.Stop()
	for {
		select {
		case <-l.quit:
			return
		case <-t.C:
			l.mu.Lock()
			l.bar.Describe(l.describe())
			l.mu.Unlock()
		}
	}
}

// flush prints the buffered lines above the progress line and redraws it.
func (l *live) flush() {
	if l.buf.Len() > 0 {
		_ = l.bar.Clear()
		_, _ = l.term.Write(l.buf.Bytes())
		l.buf.Reset()
	}
	l.bar.Describe(l.describe())
}

func (l *live) event(e *wire.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.p.event(e)
	if e.Attempt != l.attempt {
		l.attempt = e.Attempt
		l.turn = 0
	}
	switch e.Kind {
	case fleettype.EventTurnStarted:
		if e.MaxTurns > 0 && e.MaxTurns != l.max {
			l.max = e.MaxTurns
			l.bar.ChangeMax(e.MaxTurns)
		}
		l.turn = e.Turn
		_ = l.bar.Set(e.Turn - 1) // turns completed
		l.doing = "model thinking"
	case fleettype.EventModelOutput:
		l.doing = "model answered"
	case fleettype.EventToolCall:
		l.doing = "running " + e.Tool
	case fleettype.EventToolResult:
		l.doing = e.Tool + " done"
	case fleettype.EventRetry, fleettype.EventInvalidResponse:
		l.doing = "retrying the model (" + string(e.Code) + ")"
	case fleettype.EventParked:
		l.doing = "waiting for an answer (enqueue answer)"
	case fleettype.EventFinished:
		l.doing = "finished (" + string(e.Status) + ")"
	}
	l.flush()
}

func (l *live) result(r *wire.AgentResult) {
	l.close()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.p.result(r)
	_, _ = l.term.Write(l.buf.Bytes())
	l.buf.Reset()
}

func (l *live) close() {
	select {
	case <-l.quit:
		return
	default:
	}
	close(l.quit)
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	_ = l.bar.Clear()
	_, _ = l.term.Write(l.buf.Bytes())
	l.buf.Reset()
}

// SGR colors for the diff on a terminal.
const (
	sgrRed   = "\x1b[31m"
	sgrGreen = "\x1b[32m"
	sgrCyan  = "\x1b[36m"
	sgrBold  = "\x1b[1m"
	sgrReset = "\x1b[0m"
)

// colorDiff colors a unified diff's lines: headers bold, hunks cyan,
// removals red, additions green.
func colorDiff(diff string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(diff, "\n") {
		if l == "" {
			continue
		}
		text, nl := strings.CutSuffix(l, "\n")
		c := ""
		switch {
		case strings.HasPrefix(text, "--- "), strings.HasPrefix(text, "+++ "):
			c = sgrBold
		case strings.HasPrefix(text, "@@"):
			c = sgrCyan
		case strings.HasPrefix(text, "-"):
			c = sgrRed
		case strings.HasPrefix(text, "+"):
			c = sgrGreen
		}
		if c != "" {
			text = c + text + sgrReset
		}
		b.WriteString(text)
		if nl {
			b.WriteByte('\n')
		}
	}
	return b.String()
}
