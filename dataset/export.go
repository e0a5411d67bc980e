package dataset

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/wire"
)

// Source is what Export reads: FLEET_TRANSCRIPTS and the jobs' results.
// *client.Client implements it. Export calls it from several goroutines
// at once.
type Source interface {
	// ScanTranscripts calls fn with every stored transcript and review.
	ScanTranscripts(ctx context.Context, fn func(client.TranscriptEntry) error) error
	// TranscriptAt reads the message at seq again (ok false: gone).
	TranscriptAt(ctx context.Context, seq uint64) (client.TranscriptEntry, bool, error)
	// Result returns the job's stored result: client.ErrNoResult when it
	// has none (not finished, or expired).
	Result(ctx context.Context, jobID string) (*wire.AgentResult, error)
}

// Options configure Export.
type Options struct {
	Format Format
	Filter Filter
	// NoMeta leaves the "fleet" object out of the records.
	NoMeta bool
	// Progress, when set, is called as the export goes (never
	// concurrently): phase "read" with the stream messages read so far,
	// "join" with the jobs whose transcript was chosen and their total,
	// then "write" with the records considered so far and their total.
	Progress func(phase string, done, total int)
}

// Summary is what Export kept and dropped, and why.
type Summary struct {
	// Messages is how many stream messages were read; Transcripts and
	// Reviews split them; Jobs counts the jobs with a transcript.
	Messages, Transcripts, Reviews, Jobs int
	// Kept is how many records were written.
	Kept int
	// Dropped counts the transcripts left out, by reason.
	Dropped map[string]int
}

// Reasons a transcript is dropped besides the filter's own.
const (
	DropCorrupt      = "corrupt or truncated transcript record"
	DropSuperseded   = "superseded attempt (not the job's transcript)"
	DropNotNamed     = "not the transcript the job's result names"
	DropCutContents  = "contents cut to fit max_payload (not what the model saw)"
	DropBadReview    = "the job's last review record is corrupt"
	DropLastChance   = "turn limit hit (its last prompt offered only submit_result)"
	DropUnrenderable = "does not render as FunctionGemma"
	DropExpired      = "expired while exporting"
)

// candidate is one decodable transcript of a job.
type candidate struct {
	seq uint64
	h   header
}

// Export writes the transcripts opts select, one JSON record a line, in a
// stable order (by finish time, then job id), and returns the summary. A
// record that does not decode or render is dropped and counted; the
// export goes on. Errors are the source's (connection) or w's.
func Export(ctx context.Context, src Source, w io.Writer, opts Options) (*Summary, error) {
	if opts.Format != FormatMessages && opts.Format != FormatText {
		return nil, fmt.Errorf("dataset: format %q: want %s or %s", opts.Format, FormatMessages, FormatText)
	}
	if err := opts.Filter.Validate(); err != nil {
		return nil, err
	}
	progress := opts.Progress
	if progress == nil {
		progress = func(string, int, int) {}
	}
	sum := &Summary{Dropped: map[string]int{}}
	jobs := map[string][]candidate{}
	reviews := map[string]*wire.Review{} // nil value: the last review is corrupt
	err := src.ScanTranscripts(ctx, func(e client.TranscriptEntry) error {
		sum.Messages++
		progress("read", sum.Messages, 0)
		if e.Review {
			sum.Reviews++
			r := new(wire.Review)
			if json.Unmarshal(e.Data, r) != nil || r.Validate() != nil || r.JobID != e.JobID {
				r = nil
			}
			reviews[e.JobID] = r
			return nil
		}
		sum.Transcripts++
		if _, seen := jobs[e.JobID]; !seen {
			jobs[e.JobID] = nil
		}
		var h header
		if json.Unmarshal(e.Data, &h) != nil || h.JobID != e.JobID {
			sum.Dropped[DropCorrupt]++
			return nil
		}
		jobs[e.JobID] = append(jobs[e.JobID], candidate{seq: e.Seq, h: h})
		return nil
	})
	if err != nil {
		return nil, err
	}
	sum.Jobs = len(jobs)

	// Each job's pick needs its result: looked up concurrently (the
	// source's round trips, not CPU, bound this), collected in order.
	ids := sortedKeys(jobs)
	picks := make([]*candidate, len(ids))
	dropped := make([]map[string]int, len(ids))
	var mu sync.Mutex
	joined := 0
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(concurrency)
	for i, id := range ids {
		g.Go(func() error {
			local := &Summary{Dropped: map[string]int{}}
			pick, err := choose(gctx, src, id, jobs[id], local)
			picks[i], dropped[i] = pick, local.Dropped
			mu.Lock()
			joined++
			progress("join", joined, len(ids))
			mu.Unlock()
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	var keep []candidate
	for i, id := range ids {
		for why, n := range dropped[i] {
			sum.drop(why, n)
		}
		pick := picks[i]
		if pick == nil {
			continue
		}
		var verdict wire.Verdict
		if r, reviewed := reviews[id]; reviewed {
			if r == nil {
				sum.Dropped[DropBadReview]++
				continue
			}
			verdict = r.Verdict
		}
		if why := opts.Filter.drop(&pick.h, verdict); why != "" {
			sum.Dropped[why]++
			continue
		}
		if pick.h.Truncated {
			sum.Dropped[DropCutContents]++
			continue
		}
		if pick.h.LastChance {
			sum.Dropped[DropLastChance]++
			continue
		}
		keep = append(keep, *pick)
	}
	sort.Slice(keep, func(i, j int) bool {
		a, b := keep[i].h, keep[j].h
		if !a.Timings.FinishedAt.Equal(b.Timings.FinishedAt) {
			return a.Timings.FinishedAt.Before(b.Timings.FinishedAt)
		}
		return a.JobID < b.JobID
	})

	// The records are read and encoded concurrently a window at a time
	// and written in order.
	bw := bufio.NewWriter(w)
	for start := 0; start < len(keep); start += window {
		part := keep[start:min(start+window, len(keep))]
		lines := make([][]byte, len(part))
		whys := make([]string, len(part))
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(concurrency)
		for i, c := range part {
			g.Go(func() (err error) {
				lines[i], whys[i], err = record(gctx, src, c, reviews[c.h.JobID], opts)
				return err
			})
		}
		if err := g.Wait(); err != nil {
			return nil, err
		}
		for i := range part {
			progress("write", start+i, len(keep))
			if whys[i] != "" {
				sum.drop(whys[i], 1)
				continue
			}
			if _, err := bw.Write(append(lines[i], '\n')); err != nil {
				return nil, err
			}
			sum.Kept++
		}
	}
	progress("write", len(keep), len(keep))
	return sum, bw.Flush()
}

// concurrency bounds the source requests under way at once; window is how
// many records are read ahead of the writer.
const (
	concurrency = 16
	window      = 256
)

// choose picks the job's transcript: the one its stored result names,
// else (the result expired, or none is stored yet) the one of the highest
// lease, as ledger.ReadTranscript does. The others are counted as dropped.
func choose(ctx context.Context, src Source, jobID string, cands []candidate, sum *Summary) (*candidate, error) {
	if len(cands) == 0 {
		return nil, nil
	}
	res, err := src.Result(ctx, jobID)
	switch {
	case errors.Is(err, client.ErrNoResult):
		best := 0
		for i, c := range cands {
			if c.h.Lease > cands[best].h.Lease {
				best = i
			}
		}
		sum.drop(DropSuperseded, len(cands)-1)
		return &cands[best], nil
	case err != nil:
		return nil, fmt.Errorf("dataset: result of %s: %w", jobID, err)
	}
	for i, c := range cands {
		if c.seq == res.TranscriptSeq {
			sum.drop(DropSuperseded, len(cands)-1)
			return &cands[i], nil
		}
	}
	sum.drop(DropNotNamed, len(cands))
	return nil, nil
}

// drop counts n transcripts dropped for why.
func (s *Summary) drop(why string, n int) {
	if n > 0 {
		s.Dropped[why] += n
	}
}

// record reads c's transcript again and encodes its record; why says why
// it is dropped instead.
func record(ctx context.Context, src Source, c candidate, review *wire.Review, opts Options) (line []byte, why string, err error) {
	e, ok, err := src.TranscriptAt(ctx, c.seq)
	if err != nil {
		return nil, "", err
	}
	if !ok {
		return nil, DropExpired, nil
	}
	t := new(wire.Transcript)
	if err := json.Unmarshal(e.Data, t); err != nil {
		return nil, DropCorrupt, nil
	}
	req := Request(t)
	var m *Meta
	if !opts.NoMeta {
		m = meta(&wire.TranscriptView{Transcript: t, Review: review})
	}
	var rec any
	switch opts.Format {
	case FormatMessages:
		conv, err := ConversationOf(req)
		if err != nil {
			return nil, DropUnrenderable, nil
		}
		// A conversational record must render like its text record.
		if _, err := Render(req); err != nil {
			return nil, DropUnrenderable, nil
		}
		conv.Fleet = m
		rec = conv
	case FormatText:
		r, err := Render(req)
		if err != nil {
			return nil, DropUnrenderable, nil
		}
		r.Fleet = m
		rec = r
	}
	line, err = json.Marshal(rec)
	return line, "", err
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
