package main

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/wire"
)

// printer writes a job's progress for people, or as newline-delimited JSON.
type printer struct {
	w       io.Writer
	json    bool
	attempt int
	start   time.Time
	// color colors the diff (a terminal).
	color bool
}

func newPrinter(w io.Writer, asJSON bool) *printer {
	return &printer{w: w, json: asJSON, start: time.Now()}
}

func (p *printer) line(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		fmt.Fprintf(p.w, `{"error":%q}`+"\n", err.Error())
		return
	}
	fmt.Fprintf(p.w, "%s\n", b)
}

func (p *printer) queued(enq *client.Enqueued, req *wire.RunRequest, final bool) {
	if p.json {
		if final {
			p.line(map[string]any{"job_id": enq.JobID, "seq": enq.Seq, "duplicate": enq.Duplicate})
		}
		return
	}
	if final {
		fmt.Fprintln(p.w, enq.JobID)
		return
	}
	dup := ""
	if enq.Duplicate {
		dup = " (duplicate job id: already queued, not queued again)"
	}
	fmt.Fprintf(p.w, "job %s queued%s\n  %s on %s %s (%s), %d workspace file(s)\n",
		enq.JobID, dup, req.Operation, req.Node.Type, req.Node.Name, req.Node.FilePath, len(req.Files))
}

// capLine puts s on one line and cuts it after n characters (never inside
// a character's UTF-8 bytes).
func capLine(s string, n int) string {
	s = strings.ReplaceAll(strings.TrimSpace(s), "\n", " ⏎ ")
	chars := 0
	for i := range s {
		if chars == n {
			return s[:i] + "…"
		}
		chars++
	}
	return s
}

func ms(d time.Duration) string {
	if d < time.Millisecond {
		return d.String()
	}
	return d.Round(time.Millisecond).String()
}

func (p *printer) event(e *wire.Event) {
	if p.json {
		p.line(e)
		return
	}
	if e.Attempt != p.attempt {
		if p.attempt != 0 {
			fmt.Fprintf(p.w, "-- attempt %d (the job was redelivered) --\n", e.Attempt)
		}
		p.attempt = e.Attempt
	}
	switch e.Kind {
	case fleettype.EventTurnStarted:
		fmt.Fprintf(p.w, "turn %d/%d  [%s]\n", e.Turn, e.MaxTurns, ms(time.Since(p.start)))
	case fleettype.EventModelOutput:
		var parts []string
		if len(e.Calls) > 0 {
			parts = append(parts, "calls "+strings.Join(e.Calls, ", "))
		}
		if t := capLine(e.Text, 100); t != "" {
			parts = append(parts, fmt.Sprintf("text %q", t))
		}
		if e.Usage != nil && e.Usage.PromptTokens+e.Usage.CompletionTokens > 0 {
			parts = append(parts, fmt.Sprintf("%d prompt + %d generated tokens", e.Usage.PromptTokens, e.Usage.CompletionTokens))
		}
		fmt.Fprintf(p.w, "  model (%s): %s\n", ms(e.Duration), strings.Join(parts, "; "))
	case fleettype.EventInvalidResponse:
		fmt.Fprintf(p.w, "  invalid model response: %s %s\n", e.Code, capLine(e.Text, 100))
	case fleettype.EventRetry:
		fmt.Fprintf(p.w, "  retry %d: %s\n", e.Attempt, e.Code)
	case fleettype.EventToolCall:
		fmt.Fprintf(p.w, "  → %s %s\n", e.Tool, capLine(string(e.Arguments), 120))
	case fleettype.EventContextInjected:
		fmt.Fprintf(p.w, "    [context] %s (%d bytes)\n", e.Provider, e.Size)
	case fleettype.EventToolResult:
		outcome := "ok"
		if !e.OK {
			outcome = "error " + e.Code
		}
		fmt.Fprintf(p.w, "  ← %s %s (%s)\n", e.Tool, outcome, ms(e.Duration))
	case fleettype.EventParked:
		fmt.Fprintf(p.w, "  ? %s asks: %s\n  waiting for an answer: enqueue answer %s TEXT\n", e.Tool, capLine(e.Text, 200), e.JobID)
	case fleettype.EventFinished:
		msg := string(e.Status)
		if e.Error != "" {
			msg += ": " + e.Error
		}
		fmt.Fprintf(p.w, "finished: %s\n", capLine(msg, 400))
	default:
		fmt.Fprintf(p.w, "  %s\n", e.Kind)
	}
}

// printUsage prints what the worker measured for the job: prompt tokens
// reused from the KV cache and prefilled, generated tokens sampled and
// forced by the strict grammar, the model's speed, and where the time went.
func printUsage(w io.Writer, r *wire.AgentResult) {
	u, t := r.Usage, r.Timings
	rate := func(n int, d time.Duration) string {
		if n == 0 || d <= 0 {
			return ""
		}
		return fmt.Sprintf(", %.0f tok/s", float64(n)/d.Seconds())
	}
	prefilled := u.PromptTokens - u.CachedTokens
	fmt.Fprintf(w, "prompt:   %d tokens over the turns: %d reused from the KV cache, %d prefilled (%s%s)\n",
		u.PromptTokens, u.CachedTokens, prefilled, ms(u.PromptDuration), rate(prefilled, u.PromptDuration))
	fmt.Fprintf(w, "output:   %d tokens generated: %d sampled, %d forced by the grammar (%s%s)\n",
		u.CompletionTokens, u.CompletionTokens-u.ForcedTokens, u.ForcedTokens, ms(u.CompletionDuration), rate(u.CompletionTokens, u.CompletionDuration))
	other := t.Run - t.Model - t.Tools
	if other < 0 {
		other = 0
	}
	fmt.Fprintf(w, "time:     queued %s, ran %s = model %s + tools %s + other %s, on %s, attempt %d\n",
		ms(t.Queued), ms(t.Run), ms(t.Model), ms(t.Tools), ms(other), r.Worker, r.Attempts)
}

func (p *printer) result(r *wire.AgentResult) {
	if p.json {
		p.line(r)
		return
	}
	fmt.Fprintf(p.w, "\n== result of %s ==\n", r.JobID)
	fmt.Fprintf(p.w, "state:    %s (agent status %s)\n", r.State, r.Status)
	if r.Error != "" {
		fmt.Fprintf(p.w, "error:    %s\n", capLine(r.Error, 400))
	}
	if r.Summary != "" {
		fmt.Fprintf(p.w, "summary:  %s\n", capLine(r.Summary, 400))
	}
	fmt.Fprintf(p.w, "turns:    %d, %d tool call(s)\n", r.Turns, r.ToolCalls)
	if r.Teacher != "" {
		fmt.Fprintf(p.w, "teacher:  %s\n", r.Teacher)
	}
	printUsage(p.w, r)
	if r.WorkspaceID != "" {
		fmt.Fprintf(p.w, "workspace: %s\n", r.WorkspaceID)
	}
	if len(r.Details) > 0 {
		keys := make([]string, 0, len(r.Details))
		for k := range r.Details {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		fmt.Fprintln(p.w, "details:")
		for _, k := range keys {
			b, _ := json.Marshal(r.Details[k])
			fmt.Fprintf(p.w, "  %s: %s\n", k, capLine(string(b), 200))
		}
	}
	if r.EventsDropped > 0 {
		fmt.Fprintf(p.w, "events dropped: %d\n", r.EventsDropped)
	}
	if len(r.ChangedFiles) == 0 {
		fmt.Fprintln(p.w, "changed:  nothing")
		return
	}
	fmt.Fprintf(p.w, "changed:  %s\n\n", strings.Join(r.ChangedFiles, ", "))
	if p.color {
		fmt.Fprint(p.w, colorDiff(r.Diff))
	} else {
		fmt.Fprint(p.w, r.Diff)
	}
	if !strings.HasSuffix(r.Diff, "\n") {
		fmt.Fprintln(p.w)
	}
	fmt.Fprintf(p.w, "\nreview, then: enqueue accept %s   (or: enqueue reject %s)\n", r.JobID, r.JobID)
}

func (p *printer) status(jobID string, rec *wire.StatusRecord, res *wire.AgentResult) {
	if p.json {
		p.line(map[string]any{"job_id": jobID, "status": rec, "result": res})
		return
	}
	if rec != nil {
		fmt.Fprintf(p.w, "job %s: %s", jobID, rec.State)
		switch {
		case rec.Operation != "" && rec.Priority != "":
			fmt.Fprintf(p.w, " (%s, priority %s)", rec.Operation, rec.Priority)
		case rec.Operation != "":
			fmt.Fprintf(p.w, " (%s)", rec.Operation)
		case rec.Priority != "":
			fmt.Fprintf(p.w, " (priority %s)", rec.Priority)
		}
		fmt.Fprintln(p.w)
		if rec.Worker != "" {
			fmt.Fprintf(p.w, "  worker %s, attempt %d\n", rec.Worker, rec.Attempt)
		}
		if rec.ScheduledAt != nil && rec.State == wire.StateScheduled {
			fmt.Fprintf(p.w, "  scheduled for %s\n", rec.ScheduledAt.UTC().Format(time.RFC3339))
		}
		if rec.State == wire.StateWaiting {
			fmt.Fprintf(p.w, "  asks: %s\n", capLine(rec.Question, 500))
			if rec.Deadline != nil {
				fmt.Fprintf(p.w, "  answer with: enqueue answer %s TEXT (before %s)\n", jobID, rec.Deadline.UTC().Format(time.RFC3339))
			}
		}
		if rec.Code != "" || rec.Reason != "" {
			fmt.Fprintf(p.w, "  %s %s\n", rec.Code, rec.Reason)
		}
		fmt.Fprintf(p.w, "  updated %s\n", rec.UpdatedAt.Format(time.RFC3339))
	} else {
		fmt.Fprintf(p.w, "job %s: no status record (expired); its result:\n", jobID)
	}
	if res != nil {
		fmt.Fprintf(p.w, "  result: %s (agent status %s), %d turn(s), changed %d file(s)\n",
			res.State, res.Status, res.Turns, len(res.ChangedFiles))
		if res.Summary != "" {
			fmt.Fprintf(p.w, "  summary: %s\n", capLine(res.Summary, 200))
		}
		if res.Error != "" {
			fmt.Fprintf(p.w, "  error: %s\n", res.Error)
		}
	}
}
