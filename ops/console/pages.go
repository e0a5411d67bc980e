package console

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agentfleet/fleet/internal/textcut"
	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/presence"
	"github.com/agentfleet/fleet/queue/wire"
)

// page is what every template gets.
type page struct {
	// Console is the console's title; Title the page's; Nav the active
	// tab.
	Console, Title, Nav string
	// Actions: the forms that change things are shown; Token goes in them.
	Actions bool
	Token   string
	// Error is shown in the page's error box.
	Error string
	// Refresh, when not 0, reloads the page after that many seconds (a
	// running batch's progress, without JavaScript).
	Refresh int
	Data    any
}

// render executes a page template into a buffer, then writes it with the
// status and a Server-Timing header (the time spent since start).
func (s *Server) render(w http.ResponseWriter, start time.Time, status int, name string, p page) {
	p.Console, p.Actions, p.Token = s.cfg.Title, s.cfg.AllowActions, s.token
	if p.Nav == "" {
		p.Nav = name
	}
	var buf bytes.Buffer
	if err := s.pages[name].ExecuteTemplate(&buf, "layout", p); err != nil {
		s.cfg.Logger.Error("console: render", "page", name, "err", err)
		http.Error(w, "console: cannot render the page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Server-Timing", fmt.Sprintf("page;dur=%.2f", float64(time.Since(start).Microseconds())/1000))
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// failure is the status and message a data error shows as.
func failure(err error) (int, string) {
	switch {
	case errors.Is(err, client.ErrJobNotFound), errors.Is(err, client.ErrDeadLetterNotFound):
		return http.StatusNotFound, err.Error()
	case errors.Is(err, wire.ErrInvalidRequest):
		return http.StatusBadRequest, err.Error()
	case errors.Is(err, client.ErrNoStreams):
		return http.StatusServiceUnavailable, err.Error()
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout, "the fleet's stores did not answer in time: " + err.Error()
	}
	return http.StatusBadGateway, err.Error()
}

func (s *Server) readCtx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), s.cfg.ReadTimeout)
}

type queuesView struct {
	Queues  []queueRow
	Streams []streamRow
	Workers int
	Slots   int
}

func (s *Server) queuesPage(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	ctx, cancel := s.readCtx(r)
	defer cancel()
	rows, streams, workers, err := s.queuesData(ctx)
	p := page{Title: "Queues"}
	status := http.StatusOK
	if err != nil {
		status, p.Error = failure(err)
	}
	v := queuesView{Queues: rows, Streams: streams, Workers: len(workers)}
	for _, w := range workers {
		v.Slots += w.Slots
	}
	p.Data = v
	s.render(w, start, status, "queues", p)
}

type workersView struct {
	Workers []presence.Record
	Now     time.Time
	Slots   int
	Busy    int
}

func (s *Server) workersPage(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	ctx, cancel := s.readCtx(r)
	defer cancel()
	workers, err := presence.List(ctx, s.js)
	p := page{Title: "Workers"}
	status := http.StatusOK
	if err != nil {
		status, p.Error = failure(err)
	}
	v := workersView{Workers: workers, Now: time.Now().UTC()}
	for _, w := range workers {
		v.Slots += w.Slots
		v.Busy += w.Busy()
	}
	p.Data = v
	s.render(w, start, status, "workers", p)
}

type jobsView struct {
	Filter  jobFilter
	SinceIn string
	List    *jobList
	States  []wire.JobState
	Since   any
	// Newer and Older link to the neighbouring pages ("" = none).
	Newer, Older string
}

func (s *Server) jobsPage(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	q := r.URL.Query()
	f := jobFilter{Operation: q.Get("operation"), State: wire.JobState(q.Get("state")), Match: strings.TrimSpace(q.Get("q"))}
	p := page{Title: "Jobs"}
	status := http.StatusOK
	var problems []string
	if f.Operation != "" && !wire.ValidOperation(f.Operation) {
		problems = append(problems, fmt.Sprintf("operation %q is not a valid operation", wire.Clip(f.Operation)))
		f.Operation = ""
	}
	if f.State != "" && !slices.Contains(allStates, f.State) {
		problems = append(problems, fmt.Sprintf("state %q is not a job state", wire.Clip(string(f.State))))
		f.State = ""
	}
	if v := q.Get("since"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			problems = append(problems, fmt.Sprintf("since %q is not a positive duration", wire.Clip(v)))
		} else {
			f.Since = d
		}
	}
	if v := q.Get("page"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			problems = append(problems, fmt.Sprintf("page %q is not a page number", wire.Clip(v)))
		} else {
			f.Page = n
		}
	}
	v := jobsView{Filter: f, States: allStates, Since: sinceChoices, SinceIn: q.Get("since")}
	if len(problems) > 0 {
		status, p.Error = http.StatusBadRequest, strings.Join(problems, "; ")
	}
	ctx, cancel := s.readCtx(r)
	defer cancel()
	list, err := s.listJobs(ctx, f, time.Now())
	if err != nil {
		status, p.Error = failure(err)
	}
	v.List = list
	pageURL := func(n int) string {
		qs := url.Values{}
		for k, vals := range q {
			qs[k] = vals
		}
		qs.Set("page", strconv.Itoa(n))
		return "/jobs?" + qs.Encode()
	}
	if f.Page > 0 {
		v.Newer = pageURL(f.Page - 1)
	}
	if list != nil && list.HasNext {
		v.Older = pageURL(f.Page + 1)
	}
	p.Data = v
	s.render(w, start, status, "jobs", p)
}

func (s *Server) jobPage(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	ctx, cancel := s.readCtx(r)
	defer cancel()
	v, err := s.jobData(ctx, r.PathValue("id"))
	p := page{Title: "Job " + wire.Clip(r.PathValue("id")), Nav: "jobs"}
	status := http.StatusOK
	if err != nil {
		status, p.Error = failure(err)
		v = &jobView{JobID: r.PathValue("id")}
	}
	if n := r.URL.Query().Get("replayed"); n != "" {
		v.Note = "Replayed dead letter " + wire.Clip(n) + " as this job."
	}
	p.Data = v
	s.render(w, start, status, "job", p)
}

type dlqView struct {
	Letters    []*client.DeadLetter
	Operations []string
	Note       string
}

func (s *Server) dlqPage(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	ctx, cancel := s.readCtx(r)
	defer cancel()
	status, p := s.dlqData(ctx, "")
	s.render(w, start, status, "dlq", p)
}

func (s *Server) dlqData(ctx context.Context, note string) (int, page) {
	p := page{Title: "Dead letters"}
	status := http.StatusOK
	all, err := s.cl.DeadLetters(ctx)
	if err != nil {
		status, p.Error = failure(err)
	}
	v := dlqView{Note: note}
	for i := len(all) - 1; i >= 0; i-- { // newest first
		v.Letters = append(v.Letters, all[i])
		if op := all[i].Operation; !slices.Contains(v.Operations, op) {
			v.Operations = append(v.Operations, op)
		}
	}
	slices.Sort(v.Operations)
	p.Data = v
	return status, p
}

// findDeadLetter returns the dead letter at FLEET_DLQ sequence ref.
func (s *Server) findDeadLetter(ctx context.Context, ref string) (*client.DeadLetter, error) {
	seq, err := strconv.ParseUint(ref, 10, 64)
	if err != nil {
		return nil, wire.Invalid("seq", "%q is not a dead letter's sequence", wire.Clip(ref))
	}
	all, err := s.cl.DeadLetters(ctx)
	if err != nil {
		return nil, err
	}
	for _, d := range all {
		if d.Seq == seq {
			return d, nil
		}
	}
	return nil, fmt.Errorf("%w: %d", client.ErrDeadLetterNotFound, seq)
}

type deadLetterView struct {
	Letter  *client.DeadLetter
	Headers [][2]string
	Request *wire.RunRequest
	// RequestErr says why the request cannot be decoded (replay then
	// fails too).
	RequestErr string
	Raw        string
}

func (s *Server) deadLetterPage(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	ctx, cancel := s.readCtx(r)
	defer cancel()
	p := page{Title: "Dead letter " + wire.Clip(r.PathValue("seq")), Nav: "dlq"}
	status := http.StatusOK
	d, err := s.findDeadLetter(ctx, r.PathValue("seq"))
	if err != nil {
		status, p.Error = failure(err)
		s.render(w, start, status, "deadletter", p)
		return
	}
	v := deadLetterView{Letter: d}
	for k, vals := range d.Header {
		for _, val := range vals {
			v.Headers = append(v.Headers, [2]string{k, val})
		}
	}
	slices.SortFunc(v.Headers, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
	if req, err := d.Request(); err != nil {
		v.RequestErr = err.Error()
		if utf8.Valid(d.Data) {
			v.Raw = clipText(string(d.Data), maxRawRequest)
		} else {
			v.Raw = clipText(fmt.Sprintf("%q", d.Data), maxRawRequest)
		}
	} else {
		v.Request = req
		v.Raw = clipText(prettyJSON(req), maxRawRequest)
	}
	p.Data = v
	s.render(w, start, status, "deadletter", p)
}

// maxRawRequest caps the request text a dead letter's page shows.
const maxRawRequest = 64 << 10

// clipText cuts s to at most n bytes on a rune boundary, saying so.
func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	p := textcut.Prefix(s, n)
	return p + fmt.Sprintf("\n… (%d more bytes)", len(s)-len(p))
}
