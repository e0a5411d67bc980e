package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/agentfleet/fleet/dataset"
	"github.com/agentfleet/fleet/queue/wire"
)

func (c *cli) cmdDataset(args []string) error {
	const usage = "dataset export [--format messages|text] [-o FILE] [filters]"
	if len(args) == 0 {
		return fail(exitUsage, "dataset: want a subcommand: %s", usage)
	}
	switch sub, rest := args[0], args[1:]; sub {
	case "export":
		return c.datasetExport(rest)
	case "-h", "--help", "-help", "help":
		fmt.Fprintf(c.stdout, "Usage: enqueue %s\n\nRun enqueue dataset export --help for its flags.\n", usage)
		return nil
	default:
		return fail(exitUsage, "dataset: unknown subcommand %q", sub)
	}
}

func (c *cli) datasetExport(args []string) error {
	fs := c.subFlags("dataset export", "dataset export [--format messages|text] [-o FILE] [--operation OP,...] "+
		"[--agent-version DIGEST] [--model M] [--outcome S,...] [--verdict V,...] [--since T] [--until T] [--teacher] [--no-meta]")
	format := fs.String("format", "messages", "`messages`: conversational records (messages + tools); text: the rendered FunctionGemma prompt text")
	out := fs.String("o", "", "write to `FILE` (replaced only when the export succeeded; default stdout)")
	ops := fs.String("operation", "", "keep these operations (`OP,...`)")
	agentVersion := fs.String("agent-version", "", "keep runs of the agent version whose digest starts with `DIGEST` (transcript agent_digest)")
	model := fs.String("model", "", "keep runs of the model whose digest starts with `M`, or whose name or backend contains it")
	outcome := fs.String("outcome", "", "keep runs that ended `S,...` (succeeded, failed, dead, canceled)")
	verdict := fs.String("verdict", "accepted", "keep jobs whose last review is `V,...` (accepted, rejected, unreviewed, or any)")
	since := fs.String("since", "", "keep runs finished at or after `T` (RFC 3339, YYYY-MM-DD, or a duration ago such as 72h)")
	until := fs.String("until", "", "keep runs finished before `T` (same forms)")
	teacher := fs.Bool("teacher", false, "keep only teacher runs")
	noMeta := fs.Bool("no-meta", false, "leave the \"fleet\" object (job, agent, model, review) out of the records")
	noProgress := fs.Bool("no-progress", false, "no progress bar even on a terminal")
	if _, err := c.parse(fs, args, 0, "no arguments"); err != nil {
		return err
	}
	now := time.Now()
	f := dataset.Filter{Operations: list(*ops), AgentVersion: *agentVersion, Model: *model}
	for _, s := range list(*outcome) {
		f.States = append(f.States, wire.JobState(s))
	}
	if v := list(*verdict); len(v) != 1 || v[0] != "any" {
		f.Verdicts = v
	}
	var err error
	if f.Since, err = pointInTime(*since, now); err != nil {
		return fail(exitUsage, "--since: %v", err)
	}
	if f.Until, err = pointInTime(*until, now); err != nil {
		return fail(exitUsage, "--until: %v", err)
	}
	if *teacher {
		f.Teacher = teacher
	}
	if err := f.Validate(); err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	opts := dataset.Options{Format: dataset.Format(*format), Filter: f, NoMeta: *noMeta}
	if opts.Format != dataset.FormatMessages && opts.Format != dataset.FormatText {
		return fail(exitUsage, "--format %q: want messages or text", *format)
	}
	var progress *exportProgress
	if !*noProgress && isTerminal(c.stderr) {
		progress = &exportProgress{w: c.stderr}
		opts.Progress = progress.update
	}

	sess, err := c.dialFleet(wire.JSON)
	if err != nil {
		return err
	}
	defer sess.close()
	ctx, cctx, cl := sess.ctx, sess.cctx, sess.cl

	if progress != nil {
		// The stream's size now: the reading bar's total.
		if n, err := cl.TranscriptsSize(cctx); err == nil {
			progress.readTotal = int(n)
		}
	}
	w, commit, discard, err := c.output(*out)
	if err != nil {
		return err
	}
	sum, err := dataset.Export(ctx, cl, w, opts)
	progress.close()
	if err != nil {
		discard()
		return connErr(err)
	}
	if err := commit(); err != nil {
		discard()
		return fail(exitUsage, "%v", err)
	}
	printSummary(c.stderr, sum, opts.Format, *out)
	return nil
}

// list splits a comma-separated flag value.
func list(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// pointInTime reads --since/--until: RFC 3339, a date (UTC midnight) or a
// duration before now; "" is the zero time.
func pointInTime(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("%q: want RFC 3339 (2026-05-01T09:00:00Z), a date (2026-05-01) or a duration ago (72h)", s)
}

// output opens where the records go: stdout, or a temporary file beside
// path that commit renames onto it (discard removes it: a failed export
// leaves path as it was).
func (c *cli) output(path string) (w io.Writer, commit func() error, discard func(), err error) {
	if path == "" {
		return c.stdout, func() error { return nil }, func() {}, nil
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return nil, nil, nil, &exitError{code: exitUsage, err: err}
	}
	commit = func() error {
		if err := tmp.Close(); err != nil {
			return err
		}
		return os.Rename(tmp.Name(), path)
	}
	discard = func() {
		_ = tmp.Close()
		_ = os.Remove(tmp.Name())
	}
	return tmp, commit, discard, nil
}

// printSummary says what was kept and dropped, and why.
func printSummary(w io.Writer, s *dataset.Summary, f dataset.Format, path string) {
	dest := "stdout"
	if path != "" {
		dest = path
	}
	fmt.Fprintf(w, "exported %d %s records to %s from %d jobs (%d transcripts, %d reviews read)\n",
		s.Kept, f, dest, s.Jobs, s.Transcripts, s.Reviews)
	total := 0
	reasons := make([]string, 0, len(s.Dropped))
	for r, n := range s.Dropped {
		total += n
		reasons = append(reasons, r)
	}
	if total == 0 {
		return
	}
	sort.Slice(reasons, func(i, j int) bool {
		if s.Dropped[reasons[i]] != s.Dropped[reasons[j]] {
			return s.Dropped[reasons[i]] > s.Dropped[reasons[j]]
		}
		return reasons[i] < reasons[j]
	})
	fmt.Fprintf(w, "dropped %d transcripts:\n", total)
	for _, r := range reasons {
		fmt.Fprintf(w, "  %6d  %s\n", s.Dropped[r], r)
	}
}

// exportProgress is the export's progress on a terminal: a bar of the
// stream messages read, then one of the records written.
type exportProgress struct {
	w         io.Writer
	bar       *progressbar.ProgressBar
	phase     string
	readTotal int // 0: unknown, a spinner
}

func (p *exportProgress) update(phase string, done, total int) {
	if phase != p.phase {
		if p.bar != nil {
			_ = p.bar.Clear()
		}
		p.phase, p.bar = phase, nil
		switch phase {
		case "read":
			max := -1
			if p.readTotal > 0 {
				max = p.readTotal
			}
			p.bar = newBar(p.w, max, "reading transcripts")
		case "join":
			p.bar = newBar(p.w, total, "joining reviews")
		case "write":
			p.bar = newBar(p.w, total, "writing records")
		}
	}
	if p.bar != nil {
		_ = p.bar.Set(done)
	}
}

func (p *exportProgress) close() {
	if p != nil && p.bar != nil {
		_ = p.bar.Clear()
		p.bar = nil
	}
}
