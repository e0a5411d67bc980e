package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"strings"
	"time"

	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/wire"
)

func (c *cli) cmdTranscript(args []string) error {
	fs := c.subFlags("transcript", "transcript <job-id> [--json]")
	asJSON := fs.Bool("json", false, "print the transcript and its review as one JSON object")
	pos, err := c.parse(fs, args, 1, "<job-id>")
	if err != nil {
		return err
	}
	jobID := pos[0]
	if !wire.ValidJobID(jobID) {
		return fail(exitUsage, "%q is not a valid job id", jobID)
	}
	return c.session(func(ctx context.Context, cl *client.Client) error {
		v, err := cl.Transcript(ctx, jobID)
		switch {
		case errors.Is(err, client.ErrNoResult):
			return unfinished(ctx, cl, jobID)
		case errors.Is(err, client.ErrNoTranscript):
			return fail(exitNotFound, "job %s has no transcript: %v", jobID, err)
		case err != nil:
			return connErr(err)
		}
		if *asJSON {
			b, err := json.Marshal(v)
			if err != nil {
				return err
			}
			fmt.Fprintf(c.stdout, "%s\n", b)
			return nil
		}
		printTranscript(c.stdout, v)
		return nil
	})
}

// unfinished is the error for a job without a result: not found (exit 4)
// or not finished yet (exit 1).
func unfinished(ctx context.Context, cl *client.Client, jobID string) error {
	st, err := cl.Status(ctx, jobID)
	if err != nil {
		return connErr(err)
	}
	return fail(exitJobFailed, "job %s has not finished (%s); wait with: enqueue attach %s", jobID, st.State, jobID)
}

// printTranscript writes a transcript for people: its header, the tools
// offered, each message, and the review.
func printTranscript(w io.Writer, v *wire.TranscriptView) {
	t := v.Transcript
	agent := t.Agent
	if t.AgentVersion > 0 {
		agent += fmt.Sprintf(" version %d, %s", t.AgentVersion, shortDigest(t.AgentDigest))
	}
	fmt.Fprintf(w, "job        %s (%s, agent %s)\n", t.JobID, t.Operation, agent)
	outcome := string(t.State)
	if t.Error != "" {
		outcome += ": " + t.Error
	}
	fmt.Fprintf(w, "outcome    %s\n", outcome)
	model := t.Model.Backend
	if t.Model.Name != "" {
		model += " " + t.Model.Name
	}
	if t.Model.Digest != "" {
		model += " (" + t.Model.Digest + ")"
	}
	if t.Model.Adapter != "" {
		model += " + adapter " + t.Model.Adapter + " (" + t.Model.AdapterDigest + ")"
	}
	if t.ModelRef != "" {
		model = t.ModelRef + ": " + model
	}
	if t.Canary {
		model += " [canary]"
	}
	if t.Teacher {
		model += " (teacher run)"
	}
	fmt.Fprintf(w, "model      %s\n", model)
	fmt.Fprintf(w, "worker     %s, attempt %d, lease %d\n", t.Worker, t.Attempt, t.Lease)
	fmt.Fprintf(w, "turns      %d, %d tool calls, %d prompt + %d completion tokens\n", t.Turns, t.ToolCalls,
		t.Usage.PromptTokens, t.Usage.CompletionTokens)
	fmt.Fprintf(w, "time       %s run (model %s, tools %s), finished %s\n", t.Timings.Run.Round(time.Millisecond),
		t.Timings.Model.Round(time.Millisecond), t.Timings.Tools.Round(time.Millisecond), t.Timings.FinishedAt.Local().Format(time.RFC3339))
	names := make([]string, len(t.Tools))
	for i, tool := range t.Tools {
		names[i] = tool.Name
	}
	fmt.Fprintf(w, "tools      %s\n", strings.Join(names, ", "))
	if r := v.Review; r != nil {
		line := fmt.Sprintf("%s by %s at %s", r.Verdict, r.Reviewer, r.Time.Local().Format(time.RFC3339))
		if r.Note != "" {
			line += ": " + r.Note
		}
		fmt.Fprintf(w, "review     %s\n", line)
	} else {
		fmt.Fprintf(w, "review     none\n")
	}
	for i, m := range t.Messages {
		fmt.Fprintf(w, "\n[%d] %s", i+1, m.Role)
		if m.Name != "" {
			fmt.Fprintf(w, " %s", m.Name)
		}
		if m.ToolCallID != "" {
			fmt.Fprintf(w, " (%s)", m.ToolCallID)
		}
		fmt.Fprintln(w)
		if m.Content != "" {
			fmt.Fprintf(w, "%s\n", indent(m.Content))
		}
		for _, call := range m.ToolCalls {
			fmt.Fprintf(w, "  -> %s %s (%s)\n", call.Name, call.Arguments, call.ID)
		}
	}
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n  ")
}

// reviewer is --reviewer, else $USER, else the account's name.
func reviewer(flag string) (string, error) {
	if r := strings.TrimSpace(flag); r != "" {
		return r, nil
	}
	if u := strings.TrimSpace(os.Getenv("USER")); u != "" {
		return u, nil
	}
	if u, err := user.Current(); err == nil && strings.TrimSpace(u.Username) != "" {
		return u.Username, nil
	}
	return "", fail(exitUsage, "no reviewer: set --reviewer NAME (or $USER)")
}

// publishReview publishes the review of a job whose result is stored; after
// the local step did its work, a failure says so.
func publishReview(ctx context.Context, cl *client.Client, jobID string, v wire.Verdict, who, note string) error {
	if _, err := cl.Review(ctx, jobID, v, who, note); err != nil {
		return connErr(fmt.Errorf("job %s was %s locally, but its review was not published: %w", jobID, v, err))
	}
	return nil
}
