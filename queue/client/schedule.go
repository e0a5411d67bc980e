package client

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// Schedule errors, matched with errors.Is.
var (
	// ErrScheduleInPast: WithAt got a time that is not in the future.
	ErrScheduleInPast = errors.New("queue: scheduled time is not in the future")
	// ErrInvalidSchedule: a schedule name or pattern the server refuses.
	ErrInvalidSchedule = errors.New("queue: invalid schedule")
	// ErrScheduleExists: AddSchedule found a schedule of that name.
	ErrScheduleExists = errors.New("queue: schedule already exists")
	// ErrScheduleNotFound: RemoveSchedule found no schedule of that name.
	ErrScheduleNotFound = errors.New("queue: schedule not found")
	// ErrSchedulesDisabled: FLEET_RUNS does not take schedule messages (a
	// capped stream, or workers older than protocol 1.3 created it).
	ErrSchedulesDisabled = errors.New("queue: FLEET_RUNS does not accept schedules (capped stream or pre-1.3 workers)")
)

// Server error codes of message scheduling.
const (
	apiSchedulesDisabled   = 10188
	apiSchedulePatternBad  = 10189
	apiWrongLastSubjectSeq = 10071
)

// WithAt schedules the job for t instead of running it now: the request
// is stored as a schedule message in FLEET_RUNS ("Nats-Schedule: @at"),
// the server moves it onto agents.run.<operation> at t, and until then the
// job's status is scheduled with its time (docs/PROTOCOL.md §12). t is
// rounded up to a whole second (the server's granularity); a time that is
// not in the future is refused with ErrScheduleInPast.
func WithAt(t time.Time) EnqueueOption {
	return func(o *enqueueOptions) { o.at = t }
}

// dueTime is t rounded up to a whole second, in UTC.
func dueTime(t time.Time) time.Time {
	d := t.UTC().Truncate(time.Second)
	if d.Before(t) {
		d = d.Add(time.Second)
	}
	return d
}

// scheduleAt turns the request message m into a one-shot schedule message.
func scheduleAt(m *nats.Msg, req *wire.RunRequest, at, now time.Time) error {
	due := dueTime(at)
	if !due.After(now) {
		return fmt.Errorf("%w: %s (now %s)", ErrScheduleInPast, due.Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	target := m.Subject // the request's subject, of its priority
	m.Subject = wire.ScheduleSubject(req.JobID)
	m.Header.Set(wire.HeaderSchedule, "@at "+due.Format(time.RFC3339))
	m.Header.Set(wire.HeaderScheduleTarget, target)
	return nil
}

// scheduleError explains a refused schedule publish.
func scheduleError(subject string, err error) error {
	var ae *jetstream.APIError
	switch {
	case errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders):
		return fmt.Errorf("%w: publish to %s: %v", ErrSchedulesDisabled, subject, err)
	case errors.As(err, &ae) && ae.ErrorCode == apiSchedulesDisabled:
		return fmt.Errorf("%w: %v", ErrSchedulesDisabled, err)
	case errors.As(err, &ae) && ae.ErrorCode == apiSchedulePatternBad:
		return fmt.Errorf("%w: %v", ErrInvalidSchedule, err)
	case errors.As(err, &ae) && ae.ErrorCode == apiWrongLastSubjectSeq:
		return fmt.Errorf("%w: %s", ErrScheduleExists, strings.TrimPrefix(subject, wire.SubjectSchedulePrefix))
	}
	return fmt.Errorf("queue: schedule %s: %w", subject, err)
}

// Schedule is a schedule message waiting in FLEET_RUNS: a recurring
// schedule, or a job enqueued WithAt that has not fired yet.
type Schedule struct {
	// Name is the schedule's name (a one-shot schedule's is its job id).
	Name string
	// Pattern is the Nats-Schedule value: "@at <time>", "@every <d>", a
	// six-field cron expression (seconds first) or @hourly and the like.
	Pattern string
	// Recurring is false for a one-shot (@at) schedule.
	Recurring bool
	// Operation and Node come from the stored request, Priority from its
	// target subject.
	Operation string
	Priority  wire.Priority
	Node      wire.Node
	// Seq is the schedule message's FLEET_RUNS sequence.
	Seq uint64
}

// AddSchedule stores a recurring schedule: each time pattern fires the
// server publishes req on agents.run.<operation>, and the worker runs it
// under its own job id "<name>-<unix seconds of the next firing>"
// (wire.FiredJobID). pattern is "@every <duration>" (at least 1s), a
// six-field cron expression "sec min hour dom month dow" or one of @hourly,
// @daily, @weekly, @monthly, @yearly; "@at" is for WithAt. req.JobID is set
// to name. A second schedule of the same name is ErrScheduleExists.
func (c *Client) AddSchedule(ctx context.Context, name, pattern string, req *wire.RunRequest) error {
	if !wire.ValidScheduleName(name) {
		return fmt.Errorf("%w: name %q must be 1-%d characters of [A-Za-z0-9_-]", ErrInvalidSchedule, wire.Clip(name), wire.MaxScheduleName)
	}
	pattern = strings.TrimSpace(pattern)
	if pattern == "" || strings.HasPrefix(pattern, "@at") || strings.ContainsAny(pattern, "\r\n") {
		return fmt.Errorf("%w: pattern %q (want @every <duration>, a six-field cron expression or @hourly/@daily/...)", ErrInvalidSchedule, wire.Clip(pattern))
	}
	if d, ok := strings.CutPrefix(pattern, "@every "); ok {
		if dur, err := time.ParseDuration(strings.TrimSpace(d)); err != nil || dur < time.Second {
			return fmt.Errorf("%w: %q: the interval must be a duration of at least 1s", ErrInvalidSchedule, pattern)
		}
	}
	req.JobID = name
	if req.CreatedAt.IsZero() {
		req.CreatedAt = time.Now().UTC()
	}
	m, err := wire.NewRequestMsg(req, c.opts.Encoding, "")
	if err != nil {
		return err
	}
	m.Subject = wire.ScheduleSubject(name)
	m.Header.Del(wire.HeaderMsgID) // re-adding after a removal must not be deduplicated
	m.Header.Set(wire.HeaderSchedule, pattern)
	m.Header.Set(wire.HeaderScheduleTarget, wire.RunSubject(req.Operation))
	m.Header.Set(wire.HeaderFleetSchedule, name)
	m.Header.Set(wire.HeaderExpectedLastSubjSeq, "0")
	if _, err := c.js.PublishMsg(ctx, m); err != nil {
		return scheduleError(m.Subject, err)
	}
	return nil
}

// Schedules lists the schedule messages in FLEET_RUNS, by name.
func (c *Client) Schedules(ctx context.Context) ([]Schedule, error) {
	st, err := c.js.Stream(ctx, wire.StreamRuns)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, ErrNoStreams
	}
	if err != nil {
		return nil, fmt.Errorf("queue: %w", err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(wire.SubjectSchedulePrefix+">"))
	if err != nil {
		return nil, fmt.Errorf("queue: %w", err)
	}
	out := make([]Schedule, 0, len(info.State.Subjects))
	for subj := range info.State.Subjects {
		raw, err := st.GetLastMsgForSubject(ctx, subj)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // fired and purged meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("queue: %s: %w", subj, err)
		}
		s := Schedule{Name: strings.TrimPrefix(subj, wire.SubjectSchedulePrefix), Pattern: raw.Header.Get(wire.HeaderSchedule), Seq: raw.Sequence}
		s.Recurring = !strings.HasPrefix(s.Pattern, "@at ")
		s.Operation, s.Priority, _ = wire.ParseRunSubject(raw.Header.Get(wire.HeaderScheduleTarget))
		if req, err := wire.DecodeRunRequest(raw.Data, raw.Header.Get(wire.HeaderContentType)); err == nil {
			s.Node = req.Node
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// RemoveSchedule deletes schedule name (a recurring one, or a WithAt job
// that has not fired yet; such a job's scheduled record is marked
// canceled). Firings already published are not affected.
func (c *Client) RemoveSchedule(ctx context.Context, name string) error {
	if !wire.ValidJobID(name) {
		return fmt.Errorf("%w: name %q", ErrInvalidSchedule, wire.Clip(name))
	}
	st, err := c.js.Stream(ctx, wire.StreamRuns)
	if err != nil {
		return fmt.Errorf("queue: %w", err)
	}
	subj := wire.ScheduleSubject(name)
	raw, err := st.GetLastMsgForSubject(ctx, subj)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return fmt.Errorf("%w: %s", ErrScheduleNotFound, name)
	}
	if err != nil {
		return fmt.Errorf("queue: %w", err)
	}
	if err := st.Purge(ctx, jetstream.WithPurgeSubject(subj)); err != nil {
		return fmt.Errorf("queue: remove schedule %s: %w", name, err)
	}
	if strings.HasPrefix(raw.Header.Get(wire.HeaderSchedule), "@at ") {
		if kv, err := c.bucket(ctx); err == nil {
			if st, err := ledger.ReadStatus(ctx, c.nc, kv, name); err == nil && st.State == wire.StateScheduled {
				_ = c.Cancel(ctx, name, "schedule removed")
			}
		}
	}
	return nil
}
