//go:build llama

package train

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/agentfleet/fleet/dataset"
	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/inference/functiongemma"
)

// ErrData is wrapped by every error about the training data: an empty or
// corrupt file, records of several agent versions, records that are not
// FunctionGemma text.
var ErrData = errors.New("train: bad dataset")

// Example is one training record split into the segments fleet's
// tokenizer sees: special tokens alone, text tokenized with special-token
// parsing off. Target marks the segments the model wrote (model_spans).
type Example struct {
	JobID       string
	AgentDigest string
	Segments    []functiongemma.Segment
	Target      []bool
}

// Dataset is the parsed training data.
type Dataset struct {
	Examples []Example
	// Digest is the sha256 of the file's bytes.
	Digest string
	// AgentDigest is the one agent version of the records ("" when the
	// records carry no fleet metadata).
	AgentDigest string
	// Format is "text" or "messages".
	Format string
	// Skipped counts records left out, by reason.
	Skipped map[string]int
}

// markers are the control tokens fleet's renderer writes, longest first.
var markers = []string{
	functiongemma.TokStartDeclaration, functiongemma.TokEndDeclaration,
	functiongemma.TokStartFunctionResponse, functiongemma.TokEndFunctionResponse,
	functiongemma.TokStartFunctionCall, functiongemma.TokEndFunctionCall,
	functiongemma.TokStartOfTurn, functiongemma.TokEndOfTurn, functiongemma.TokEscape,
}

type rawRecord struct {
	Text       *string                 `json:"text"`
	ModelSpans [][2]int                `json:"model_spans"`
	Messages   []fleettype.ChatMessage `json:"messages"`
	Tools      []fleettype.ChatTool    `json:"tools"`
	Fleet      *struct {
		JobID       string `json:"job_id"`
		AgentDigest string `json:"agent_digest"`
	} `json:"fleet"`
}

// ReadDataset reads `enqueue dataset export` JSONL, in either format: text
// records ({"text", "model_spans"}) or messages records, which are
// rendered again with fleet's renderer (their segment boundaries are then
// exactly the backend's). A corrupt line, a record without model spans or
// a file mixing agent versions is an error naming the line: training on
// part of a file silently would hide the problem. agentDigest, when set,
// must prefix every record's agent digest.
func ReadDataset(path, agentDigest string) (*Dataset, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrData, err)
	}
	defer f.Close()
	h := sha256.New()
	r := bufio.NewReaderSize(io.TeeReader(f, h), 1<<20)
	ds := &Dataset{Skipped: map[string]int{}}
	digests := map[string]int{}
	line := 0
	for {
		b, err := r.ReadBytes('\n')
		if len(b) > 0 {
			line++
			if strings.TrimSpace(string(b)) != "" {
				ex, format, err := parseRecord(b)
				if err != nil {
					return nil, fmt.Errorf("%w: %s:%d: %v", ErrData, path, line, err)
				}
				if ds.Format != "" && format != ds.Format {
					return nil, fmt.Errorf("%w: %s:%d: a %s record in a file of %s records", ErrData, path, line, format, ds.Format)
				}
				ds.Format = format
				if ex == nil {
					ds.Skipped["no model spans"]++
					continue
				}
				digests[ex.AgentDigest]++
				ds.Examples = append(ds.Examples, *ex)
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrData, path, err)
		}
	}
	ds.Digest = "sha256:" + hex.EncodeToString(h.Sum(nil))
	if len(ds.Examples) == 0 {
		return nil, fmt.Errorf("%w: %s holds no records with model spans (%d lines); export some with `enqueue dataset export --format text`", ErrData, path, line)
	}
	if agentDigest != "" {
		want := strings.TrimPrefix(agentDigest, "sha256:")
		for d, n := range digests {
			if !strings.HasPrefix(strings.TrimPrefix(d, "sha256:"), want) {
				return nil, fmt.Errorf("%w: %s: %d records are from agent version %q, not %q (export with --agent-version)", ErrData, path, n, d, agentDigest)
			}
		}
	}
	if len(digests) > 1 {
		var parts []string
		for d, n := range digests {
			if d == "" {
				d = "(none)"
			}
			parts = append(parts, fmt.Sprintf("%s: %d", d, n))
		}
		sort.Strings(parts)
		return nil, fmt.Errorf("%w: %s mixes agent versions (%s): the prompts differ between versions; export one with --agent-version or pass -agent-digest", ErrData, path, strings.Join(parts, ", "))
	}
	for d := range digests {
		ds.AgentDigest = d
	}
	return ds, nil
}

func parseRecord(b []byte) (*Example, string, error) {
	var rec rawRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, "", fmt.Errorf("not a JSON record: %v", err)
	}
	ex := &Example{}
	if rec.Fleet != nil {
		ex.JobID, ex.AgentDigest = rec.Fleet.JobID, rec.Fleet.AgentDigest
	}
	switch {
	case rec.Text != nil:
		if len(rec.ModelSpans) == 0 {
			return nil, "text", nil
		}
		segs, tgt, err := textSegments(*rec.Text, rec.ModelSpans)
		if err != nil {
			return nil, "", err
		}
		ex.Segments, ex.Target = segs, tgt
		return ex, "text", nil
	case rec.Messages != nil:
		conv := dataset.Conversation{Messages: rec.Messages, Tools: rec.Tools}
		req, err := conv.Request()
		if err != nil {
			return nil, "", err
		}
		rendered, err := dataset.Render(req)
		if err != nil {
			return nil, "", err
		}
		if len(rendered.ModelSpans) == 0 {
			return nil, "messages", nil
		}
		segs, err := functiongemma.RenderSegments(req)
		if err != nil {
			return nil, "", err
		}
		// The whole conversation: RenderSegments adds a model-turn opener
		// after a closed turn; the rendered text does not end with it.
		segs = trimTo(segs, rendered.Text)
		tgt, err := targets(segs, rendered.Text, rendered.ModelSpans)
		if err != nil {
			return nil, "", err
		}
		ex.Segments, ex.Target = segs, tgt
		return ex, "messages", nil
	}
	return nil, "", errors.New(`neither a text record ("text", "model_spans") nor a messages record ("messages")`)
}

// trimTo drops trailing segments beyond text.
func trimTo(segs []functiongemma.Segment, text string) []functiongemma.Segment {
	n := 0
	for i, s := range segs {
		if n+len(s.Text) > len(text) {
			return segs[:i]
		}
		n += len(s.Text)
	}
	return segs
}

// textSegments splits a rendered text at the control tokens fleet's
// renderer writes and after each turn's role line ("user\n"), as the
// renderer starts a segment there.
func textSegments(text string, spans [][2]int) ([]functiongemma.Segment, []bool, error) {
	if !strings.HasPrefix(text, functiongemma.TokStartOfTurn) {
		return nil, nil, errors.New("the text does not start with <start_of_turn>: not FunctionGemma text rendered by fleet (or it holds <bos>, which the tokenizer adds)")
	}
	var segs []functiongemma.Segment
	rest := text
	afterTurn := false
	for rest != "" {
		i, m := nextMarker(rest)
		if i == 0 {
			segs = append(segs, functiongemma.Segment{Text: m, Special: true})
			rest = rest[len(m):]
			afterTurn = m == functiongemma.TokStartOfTurn
			continue
		}
		if i < 0 {
			i = len(rest)
		}
		chunk := rest[:i]
		if afterTurn {
			if nl := strings.IndexByte(chunk, '\n'); nl >= 0 && nl+1 < len(chunk) {
				segs = append(segs, functiongemma.Segment{Text: chunk[:nl+1]})
				chunk = chunk[nl+1:]
			}
		}
		segs = append(segs, functiongemma.Segment{Text: chunk})
		rest = rest[i:]
		afterTurn = false
	}
	tgt, err := targets(segs, text, spans)
	return segs, tgt, err
}

func nextMarker(s string) (int, string) {
	best, bm := -1, ""
	for _, m := range markers {
		if i := strings.Index(s, m); i >= 0 && (best < 0 || i < best) {
			best, bm = i, m
		}
	}
	return best, bm
}

// targets marks the segments inside a model span. Spans are code-point
// offsets; a segment that crosses a span's edge is an error (the record
// was not rendered by fleet's renderer).
func targets(segs []functiongemma.Segment, text string, spans [][2]int) ([]bool, error) {
	// code point offset -> byte offset
	nRunes := utf8.RuneCountInString(text)
	byteAt := make([]int, 0, nRunes+1)
	for i := range text {
		byteAt = append(byteAt, i)
	}
	byteAt = append(byteAt, len(text))
	bspans := make([][2]int, len(spans))
	for k, s := range spans {
		if s[0] < 0 || s[1] < s[0] || s[1] > nRunes {
			return nil, fmt.Errorf("model span %v outside the text (%d code points)", s, nRunes)
		}
		bspans[k] = [2]int{byteAt[s[0]], byteAt[s[1]]}
	}
	tgt := make([]bool, len(segs))
	off := 0
	for i, sg := range segs {
		a, b := off, off+len(sg.Text)
		off = b
		for _, s := range bspans {
			switch {
			case a >= s[0] && b <= s[1]:
				tgt[i] = true
			case a < s[1] && b > s[0]:
				return nil, fmt.Errorf("model span %v cuts the segment %q: not fleet's rendering", s, sg.Text)
			}
		}
	}
	if off != len(text) {
		return nil, fmt.Errorf("segments cover %d of %d bytes", off, len(text))
	}
	return tgt, nil
}
