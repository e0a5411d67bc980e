package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/agentfleet/fleet/queue/client"
)

// batchView shows a followed batch's progress.
type batchView interface {
	update(st *client.BatchStatus)
	close()
}

// batchQuiet shows nothing (--json prints the final status only).
type batchQuiet struct{}

func (batchQuiet) update(*client.BatchStatus) {}
func (batchQuiet) close()                     {}

// batchLines prints one line whenever the counts change.
type batchLines struct {
	w    io.Writer
	last string
}

func (b *batchLines) update(st *client.BatchStatus) {
	var parts []string
	for _, op := range st.Operations {
		c := st.ByOp[op]
		parts = append(parts, fmt.Sprintf("%s %d/%d (%d failed, %d running)", op, c.Done, c.Planned, c.Done-c.Succeeded, c.Running))
	}
	line := strings.Join(parts, "  ")
	if line != b.last {
		b.last = line
		fmt.Fprintln(b.w, line)
	}
}

func (b *batchLines) close() {}

// batchBars draws one aggregate bar per operation on a terminal, redrawn in
// place: done of planned, failures, running, jobs/s and time left.
type batchBars struct {
	w     io.Writer
	lines int
}

func newBatchBars(w io.Writer) *batchBars { return &batchBars{w: w} }

const barWidth = 24

func bar(done, total int) string {
	if total <= 0 {
		total = 1
	}
	n := min(barWidth, done*barWidth/total)
	return barTheme.BarStart + strings.Repeat(barTheme.Saucer, n) + strings.Repeat(barTheme.SaucerPadding, barWidth-n) + barTheme.BarEnd
}

func (b *batchBars) update(st *client.BatchStatus) {
	var sb strings.Builder
	if b.lines > 0 {
		fmt.Fprintf(&sb, "\x1b[%dA", b.lines)
	}
	width := 0
	for _, op := range st.Operations {
		width = max(width, len(op))
	}
	for _, op := range st.Operations {
		c := st.ByOp[op]
		fmt.Fprintf(&sb, "\r\x1b[2K%-*s %s %s/%s  ✗ %s  running %s\n", width, op, bar(c.Done, c.Planned), itoa(c.Done), itoa(c.Planned),
			itoa(c.Done-c.Succeeded), itoa(c.Running))
	}
	tail := fmt.Sprintf("%.1f jobs/s", st.Rate)
	if st.Remaining > 0 {
		tail += fmt.Sprintf(", about %s left", st.Remaining.Round(1e9))
	}
	fmt.Fprintf(&sb, "\r\x1b[2K%s\n", tail)
	b.lines = len(st.Operations) + 1
	_, _ = io.WriteString(b.w, sb.String())
}

func (b *batchBars) close() {}
