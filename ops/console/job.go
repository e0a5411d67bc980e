package console

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/wire"
)

// eventRow is one event of a job page, with its FLEET_RESULTS sequence.
type eventRow struct {
	*wire.Event
	StreamSeq uint64
}

// storedEvents reads the job's events stored now, in order: an ordered
// consumer over agents.events.<job>, fetched exactly as many as it has.
func (s *Server) storedEvents(ctx context.Context, jobID string) ([]eventRow, error) {
	cons, err := s.js.OrderedConsumer(ctx, wire.StreamResults, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{wire.EventSubject(jobID)},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	})
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, client.ErrNoStreams
	}
	if err != nil {
		return nil, fmt.Errorf("events of %s: %w", jobID, err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("events of %s: %w", jobID, err)
	}
	var out []eventRow
	for remaining := info.NumPending; remaining > 0; {
		batch, err := cons.Fetch(int(min(remaining, 256)), jetstream.FetchContext(ctx))
		if err != nil {
			return nil, fmt.Errorf("events of %s: %w", jobID, err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			remaining--
			row, ok := decodeEventMsg(m)
			if ok {
				out = append(out, row)
			}
		}
		if err := batch.Error(); err != nil {
			return nil, fmt.Errorf("events of %s: %w", jobID, err)
		}
		if n == 0 {
			break
		}
	}
	return out, nil
}

func decodeEventMsg(m jetstream.Msg) (eventRow, bool) {
	e, err := wire.DecodeEvent(m.Data(), m.Headers().Get(wire.HeaderContentType))
	if err != nil {
		return eventRow{}, false // one unreadable event does not spoil the page
	}
	row := eventRow{Event: e}
	if md, err := m.Metadata(); err == nil {
		row.StreamSeq = md.Sequence.Stream
	}
	return row, true
}

// jobView is everything the job page shows.
type jobView struct {
	JobID  string
	Status *wire.StatusRecord
	Result *wire.AgentResult
	Events []eventRow
	// After is the stream sequence the live stream starts after.
	After uint64
	// Live is true while the job has no result: the page streams.
	Live bool
	Diff *diffView
	// Review is the job's local review state; ReviewForms says the
	// console can accept and reject (it has a Reviewer).
	Review      string
	ReviewForms bool
	// Note is the outcome of an action, Problem its error.
	Note, Problem string
	Changes       []string
}

func (s *Server) jobData(ctx context.Context, jobID string) (*jobView, error) {
	if !wire.ValidJobID(jobID) {
		return nil, wire.Invalid("job_id", "%q is not a valid job id", wire.Clip(jobID))
	}
	v := &jobView{JobID: jobID}
	st, err := s.cl.Status(ctx, jobID)
	if err != nil && !errors.Is(err, client.ErrJobNotFound) {
		return nil, err
	}
	v.Status = st
	res, err := s.cl.Result(ctx, jobID)
	if err != nil && !errors.Is(err, client.ErrNoResult) {
		return nil, err
	}
	v.Result = res
	if st == nil && res == nil {
		return nil, fmt.Errorf("%w: %s", client.ErrJobNotFound, jobID)
	}
	if v.Events, err = s.storedEvents(ctx, jobID); err != nil {
		return nil, err
	}
	if n := len(v.Events); n > 0 {
		v.After = v.Events[n-1].StreamSeq
	}
	v.Live = res == nil
	if res != nil && res.Diff != "" {
		v.Diff = renderDiff(res.Diff)
	}
	if s.cfg.Reviewer != nil {
		v.Review, v.ReviewForms = s.cfg.Reviewer.State(jobID), true
	}
	return v, nil
}

// liveHeartbeat keeps idle live streams open through proxies.
const liveHeartbeat = 15 * time.Second

// jobLive streams a job's new events as server-sent events: each event
// becomes an "ev" message carrying its rendered row; the result ends the
// stream with a "result" message (the page then reloads to show it). The
// query's after is the stream sequence of the last event the page has.
func (s *Server) jobLive(w http.ResponseWriter, r *http.Request) {
	jobID := r.PathValue("id")
	if !wire.ValidJobID(jobID) {
		http.Error(w, "not a valid job id", http.StatusBadRequest)
		return
	}
	after, _ := strconv.ParseUint(r.URL.Query().Get("after"), 10, 64)
	if last, err := strconv.ParseUint(r.Header.Get("Last-Event-ID"), 10, 64); err == nil && last > after {
		after = last // a reconnecting EventSource: go on after what it has
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(s.live, cancel)
	defer stop()
	cfg := jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{wire.EventSubject(jobID), wire.ResultSubject(jobID)},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	}
	if after > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, after+1
	}
	cons, err := s.js.OrderedConsumer(ctx, wire.StreamResults, cfg)
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(64))
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	defer it.Stop()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, "retry: 2000\n: open\n\n")
	flusher.Flush()

	msgs := make(chan jetstream.Msg)
	go func() {
		defer close(msgs)
		for {
			m, err := it.Next(jetstream.NextContext(ctx))
			if err != nil {
				return
			}
			select {
			case msgs <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	tick := time.NewTicker(liveHeartbeat)
	defer tick.Stop()
	resultSubj := wire.ResultSubject(jobID)
	var buf bytes.Buffer
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			fmt.Fprint(w, ": ping\n\n")
			flusher.Flush()
		case m, ok := <-msgs:
			if !ok {
				return
			}
			if m.Subject() == resultSubj {
				fmt.Fprint(w, "event: result\ndata: done\n\n")
				flusher.Flush()
				return
			}
			row, ok := decodeEventMsg(m)
			if !ok {
				continue
			}
			buf.Reset()
			if err := s.pages["job"].ExecuteTemplate(&buf, "event", row); err != nil {
				s.cfg.Logger.Warn("console: render event", "job", jobID, "err", err)
				continue
			}
			writeSSE(w, "ev", row.StreamSeq, buf.String())
			flusher.Flush()
		}
	}
}

// writeSSE writes one server-sent event; data may span lines.
func writeSSE(w http.ResponseWriter, event string, id uint64, data string) {
	var b strings.Builder
	b.WriteString("event: " + event + "\n")
	b.WriteString("id: " + strconv.FormatUint(id, 10) + "\n")
	for line := range strings.Lines(data) {
		b.WriteString("data: " + strings.TrimRight(line, "\r\n") + "\n")
	}
	b.WriteString("\n")
	_, _ = w.Write([]byte(b.String()))
}
