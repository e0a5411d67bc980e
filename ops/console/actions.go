package console

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/wire"
)

// maxFormBytes caps an action's form.
const maxFormBytes = 8 << 10

// action guards a form handler: the console must allow actions and the
// form must carry the server's token (a page of another site cannot post
// to the console on its visitor's behalf).
func (s *Server) action(h func(w http.ResponseWriter, r *http.Request, start time.Time)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		if !s.cfg.AllowActions {
			s.render(w, start, http.StatusForbidden, "message", page{Title: "Read-only",
				Error: "this console is read-only: start it with actions allowed (enqueue console --allow-actions, or worker.console_actions)"})
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
		if err := r.ParseForm(); err != nil {
			s.render(w, start, http.StatusBadRequest, "message", page{Title: "Bad form", Error: err.Error()})
			return
		}
		if subtle.ConstantTimeCompare([]byte(r.PostForm.Get("token")), []byte(s.token)) != 1 {
			s.render(w, start, http.StatusForbidden, "message", page{Title: "Expired form",
				Error: "the form's token does not match this console (it restarted, or the form came from elsewhere): reload the page and try again"})
			return
		}
		h(w, r, start)
	}
}

// jobResult renders the job page after an action, with its note or
// problem.
func (s *Server) jobResult(w http.ResponseWriter, r *http.Request, start time.Time, note string, changes []string, problem error) {
	ctx, cancel := s.readCtx(r)
	defer cancel()
	jobID := r.PathValue("id")
	v, err := s.jobData(ctx, jobID)
	p := page{Title: "Job " + wire.Clip(jobID), Nav: "jobs"}
	status := http.StatusOK
	if err != nil {
		status, p.Error = failure(err)
		v = &jobView{JobID: jobID}
	}
	v.Note, v.Changes = note, changes
	if problem != nil {
		v.Problem = problem.Error()
		status = http.StatusConflict
	}
	p.Data = v
	s.render(w, start, status, "job", p)
}

func (s *Server) cancelJob(w http.ResponseWriter, r *http.Request, start time.Time) {
	ctx, cancel := s.readCtx(r)
	defer cancel()
	err := s.cl.Cancel(ctx, r.PathValue("id"), "canceled from the console")
	if err != nil && !errors.Is(err, client.ErrJobFinished) {
		code, msg := failure(err)
		s.render(w, start, code, "message", page{Title: "Cancel failed", Nav: "jobs", Error: msg})
		return
	}
	s.jobResult(w, r, start, "Cancel requested.", nil, err)
}

func (s *Server) acceptJob(w http.ResponseWriter, r *http.Request, start time.Time) {
	if s.cfg.Reviewer == nil {
		s.render(w, start, http.StatusForbidden, "message", page{Title: "No project", Nav: "jobs",
			Error: "this console has no project to apply diffs to: run `enqueue console --allow-actions` in the project"})
		return
	}
	ctx, cancel := s.readCtx(r)
	defer cancel()
	rev, err := s.cfg.Reviewer.Accept(ctx, r.PathValue("id"), r.PostForm.Get("force") == "on")
	if err != nil {
		s.jobResult(w, r, start, "", nil, err)
		return
	}
	s.jobResult(w, r, start, rev.Message, rev.Changes, nil)
}

func (s *Server) rejectJob(w http.ResponseWriter, r *http.Request, start time.Time) {
	if s.cfg.Reviewer == nil {
		s.render(w, start, http.StatusForbidden, "message", page{Title: "No project", Nav: "jobs",
			Error: "this console has no project: run `enqueue console --allow-actions` in the project"})
		return
	}
	ctx, cancel := s.readCtx(r)
	defer cancel()
	rev, err := s.cfg.Reviewer.Reject(ctx, r.PathValue("id"))
	if err != nil {
		s.jobResult(w, r, start, "", nil, err)
		return
	}
	s.jobResult(w, r, start, rev.Message, nil, nil)
}

func (s *Server) replay(w http.ResponseWriter, r *http.Request, start time.Time) {
	ctx, cancel := s.readCtx(r)
	defer cancel()
	d, err := s.findDeadLetter(ctx, r.PathValue("seq"))
	if err == nil {
		var enq *client.Enqueued
		enq, _, err = s.cl.Replay(ctx, d, client.ReplayOptions{Keep: r.PostForm.Get("keep") == "on"})
		if err == nil {
			http.Redirect(w, r, "/jobs/"+url.PathEscape(enq.JobID)+"?replayed="+strconv.FormatUint(d.Seq, 10), http.StatusSeeOther)
			return
		}
	}
	code, msg := failure(err)
	s.render(w, start, code, "message", page{Title: "Replay failed", Nav: "dlq", Error: msg})
}

func (s *Server) purge(w http.ResponseWriter, r *http.Request, start time.Time) {
	ctx, cancel := s.readCtx(r)
	defer cancel()
	op := r.PostForm.Get("operation")
	if r.PostForm.Get("confirm") != "yes" {
		status, p := s.dlqData(ctx, "")
		if status == http.StatusOK {
			status = http.StatusBadRequest
		}
		p.Error = "tick the confirmation box to purge"
		s.render(w, start, status, "dlq", p)
		return
	}
	n, err := s.cl.PurgeDLQ(ctx, op)
	if err != nil {
		code, msg := failure(err)
		s.render(w, start, code, "message", page{Title: "Purge failed", Nav: "dlq", Error: msg})
		return
	}
	what := "every operation"
	if op != "" {
		what = "operation " + op
	}
	status, p := s.dlqData(ctx, fmt.Sprintf("Purged %d dead letter(s) of %s.", n, what))
	s.render(w, start, status, "dlq", p)
}
