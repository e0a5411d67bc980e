package console

import (
	"errors"
	"net/http"
	"slices"
	"time"

	"github.com/agentfleet/fleet/eval"
)

// evalsView is the evals page: the stored eval runs, newest first.
type evalsView struct {
	Runs []*eval.Run
	Bad  []string
}

// evalView is one eval run: its per-operation summary and its failures.
type evalView struct {
	Run      *eval.Run
	Summary  []eval.OpSummary
	Failures []eval.Result
	Elapsed  time.Duration
}

func (s *Server) evalsPage(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	ctx, cancel := s.readCtx(r)
	defer cancel()
	p := page{Title: "Evals"}
	status := http.StatusOK
	runs, bad, err := eval.ListRuns(ctx, s.js)
	if err != nil {
		status, p.Error = failure(err)
	}
	slices.Reverse(runs)
	p.Data = evalsView{Runs: runs, Bad: bad}
	s.render(w, start, status, "evals", p)
}

func (s *Server) evalPage(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	ctx, cancel := s.readCtx(r)
	defer cancel()
	id := r.PathValue("id")
	p := page{Title: "Eval run " + id, Nav: "evals"}
	run, err := eval.LoadRun(ctx, s.js, id)
	if err != nil {
		status := http.StatusNotFound
		p.Error = err.Error()
		if !errors.Is(err, eval.ErrRunNotFound) {
			status, p.Error = failure(err)
		}
		s.render(w, start, status, "evalrun", p)
		return
	}
	v := evalView{Run: run, Summary: eval.Summarize(run.Results), Elapsed: run.Finished.Sub(run.Started)}
	for _, r := range run.Results {
		if !r.Grade.Pass {
			v.Failures = append(v.Failures, r)
		}
	}
	p.Data = v
	s.render(w, start, http.StatusOK, "evalrun", p)
}
