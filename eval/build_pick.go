package eval

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"
)

// What evaltool's survey reports about one file (eval/py/survey.py).
type surveyFile struct {
	Path      string            `json:"path"`
	OK        bool              `json:"ok"`
	Error     string            `json:"error"`
	Lines     int               `json:"lines"`
	LintClean bool              `json:"lint_clean"`
	Reports   []json.RawMessage `json:"reports"`
	Sites     []site            `json:"sites"`
	Funcs     []funcInfo        `json:"funcs"`
}

// surveyReq is one file for evaltool's survey.
type surveyReq struct {
	Path string `json:"path"`
	Text string `json:"text"`
	Lint bool   `json:"lint"`
}

type site struct {
	Code    string   `json:"code"`
	Start   int      `json:"start"`
	End     int      `json:"end"`
	New     []string `json:"new"`
	Node    string   `json:"node"`
	EOFNL   *bool    `json:"eof_nl"`
	Choices []string `json:"choices"`
}

type funcInfo struct {
	Name      string   `json:"name"`
	Method    bool     `json:"method"`
	Start     int      `json:"start"`
	End       int      `json:"end"`
	Doc       []int    `json:"doc"`
	Params    []string `json:"params"`
	Returns   bool     `json:"returns"`
	Generator bool     `json:"generator"`
}

// Report is one linter report: [code, line, column, message].
type Report struct {
	Code    string
	Line    int
	Column  int
	Message string
}

// UnmarshalJSON reads evaltool's [code, line, column, message].
func (r *Report) UnmarshalJSON(b []byte) error {
	var a []json.RawMessage
	if err := json.Unmarshal(b, &a); err != nil || len(a) != 4 {
		return fmt.Errorf("eval: bad report %s", b)
	}
	if err := json.Unmarshal(a[0], &r.Code); err != nil {
		return err
	}
	_ = json.Unmarshal(a[1], &r.Line)
	_ = json.Unmarshal(a[2], &r.Column)
	return json.Unmarshal(a[3], &r.Message)
}

type builder struct {
	cfg    BuildConfig
	rng    *rand.Rand
	have   map[string]int
	tasks  []Task
	tested map[string]map[string]bool
	cache  *surveyCache
}

func (b *builder) quota(op, split, code string) (string, int) {
	n := b.cfg.PerSplit[split]
	if op == OpLint {
		return op + "/" + split + "/" + code, (n + len(LintCodes) - 1) / len(LintCodes)
	}
	return op + "/" + split, n
}

func (b *builder) open(op, split, code string) bool {
	k, q := b.quota(op, split, code)
	return b.have[k] < q
}

func (b *builder) opOpen(op, split string) bool {
	if op != OpLint {
		return b.open(op, split, "")
	}
	return slices.ContainsFunc(LintCodes, func(c string) bool { return b.open(op, split, c) })
}

func (b *builder) full() bool {
	for _, op := range b.cfg.Ops {
		for _, sp := range Splits {
			if b.opOpen(op, sp) {
				return false
			}
		}
	}
	return true
}

type candidate struct {
	task  Task
	input string
	base  map[string]int // upstream report counts (lint)
}

func (b *builder) visit(ctx context.Context, files []srcFile) error {
	var reqs []surveyReq
	var used []srcFile
	texts := map[string]string{}
	for _, f := range files {
		wantLint := slices.Contains(b.cfg.Ops, OpLint) && b.opOpen(OpLint, f.split)
		wantDoc := slices.Contains(b.cfg.Ops, OpDocstring) && b.opOpen(OpDocstring, f.split)
		wantRun := f.src.Tests != "" && (b.wants(OpTest, f.split) || b.wants(OpSampleData, f.split))
		if !wantLint && !wantDoc && !wantRun {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(f.src.Root, filepath.FromSlash(f.path)))
		if err != nil {
			return fmt.Errorf("eval: build: %w", err)
		}
		if !utf8.Valid(raw) || strings.Contains(string(raw), "\r") {
			continue
		}
		text := string(raw)
		lines := strings.Count(text, "\n")
		texts[f.path+"\x00"+f.src.Name] = text
		reqs = append(reqs, surveyReq{Path: f.src.Prefix + f.path, Text: text, Lint: wantLint && lines <= b.cfg.MaxLintLines})
		used = append(used, f)
	}
	if len(reqs) == 0 {
		return nil
	}
	surveyed, err := b.survey(ctx, reqs)
	if err != nil {
		return err
	}
	var cands []candidate
	for i, sf := range surveyed {
		if !sf.OK {
			continue
		}
		f := used[i]
		text := texts[f.path+"\x00"+f.src.Name]
		cands = append(cands, b.lintCandidates(f, sf, text)...)
		cands = append(cands, b.docCandidates(f, sf, text)...)
		cands = append(cands, b.runCandidates(f, sf, text)...)
	}
	return b.verify(ctx, cands)
}

// survey answers each file's survey from the cache or, for the files it
// lacks, from one evaltool request.
func (b *builder) survey(ctx context.Context, reqs []surveyReq) ([]surveyFile, error) {
	raws := make([]json.RawMessage, len(reqs))
	keys := make([]string, len(reqs))
	var ask []surveyReq
	var at []int
	for i, r := range reqs {
		if b.cache != nil {
			keys[i] = b.cache.key(r.Path, r.Text, r.Lint, b.cfg.LineLength)
			if raw, ok := b.cache.get(keys[i]); ok {
				raws[i] = raw
				continue
			}
		}
		ask, at = append(ask, r), append(at, i)
	}
	if len(ask) > 0 {
		var resp struct {
			Files []json.RawMessage `json:"files"`
		}
		if err := b.cfg.Python.run(ctx, "survey", map[string]any{"files": ask, "line_length": b.cfg.LineLength}, &resp); err != nil {
			return nil, err
		}
		if len(resp.Files) != len(ask) {
			return nil, fmt.Errorf("eval: build: survey answered %d files for %d", len(resp.Files), len(ask))
		}
		for j, raw := range resp.Files {
			raws[at[j]] = raw
			if b.cache != nil {
				b.cache.put(keys[at[j]], raw)
			}
		}
	}
	out := make([]surveyFile, len(reqs))
	for i, raw := range raws {
		if err := json.Unmarshal(raw, &out[i]); err != nil {
			return nil, fmt.Errorf("eval: build: survey of %s: %v", reqs[i].Path, err)
		}
	}
	return out, nil
}

func (b *builder) newTask(f srcFile, text, op string, e Edit) Task {
	return Task{Op: op, Split: f.split, Source: f.src.Name, Path: f.path, File: f.src.Prefix + f.path,
		Unit: f.unit, SHA256: sha([]byte(text)), Defect: e}
}

func nodeOf(funcs []funcInfo, name string) Node {
	for _, fn := range funcs {
		if fn.Name == name {
			typ := "function"
			if fn.Method {
				typ = "method"
			}
			return Node{Name: fn.Name, Type: typ, Start: fn.Start, End: fn.End}
		}
	}
	return Node{Type: "file"}
}

func (b *builder) lintCandidates(f srcFile, sf surveyFile, text string) []candidate {
	if !sf.LintClean || len(sf.Sites) == 0 {
		return nil
	}
	byCode := map[string][]site{}
	for _, s := range sf.Sites {
		byCode[s.Code] = append(byCode[s.Code], s)
	}
	codes := slices.Clone(LintCodes)
	b.rng.Shuffle(len(codes), func(i, j int) { codes[i], codes[j] = codes[j], codes[i] })
	base := map[string]int{}
	for _, raw := range sf.Reports {
		var r Report
		if json.Unmarshal(raw, &r) == nil {
			base[r.Code]++
		}
	}
	var out []candidate
	for _, code := range codes {
		if len(out) == 2 || len(byCode[code]) == 0 || !b.open(OpLint, f.split, code) {
			continue
		}
		s := byCode[code][b.rng.IntN(len(byCode[code]))]
		e, ok := b.editAt(s)
		if !ok {
			continue
		}
		t := b.newTask(f, text, OpLint, e)
		t.Node = nodeOf(sf.Funcs, s.Node)
		if b.cfg.Extra > 0 {
			t.Extra = b.extraEdits(byCode, e, b.rng.IntN(b.cfg.Extra+1))
			if sf.Lines <= FileNodeLines {
				t.Node = Node{}
			}
		}
		in, err := ApplyEdits(text, t.Edits())
		if err != nil {
			continue
		}
		var spans, names []string
		for _, x := range t.Edits() {
			spans = append(spans, fmt.Sprintf("%d-%d", x.Start, max(x.End, x.Start)))
			names = append(names, x.Code)
		}
		t.Expect = []string{
			"the file parses; its syntax tree, tokens, comments and blank lines are the upstream file's",
			"only upstream lines " + strings.Join(spans, ", ") + " change",
			"pycodestyle and pyflakes no longer report " + strings.Join(names, ", ") + " and report nothing the upstream file does not",
		}
		out = append(out, candidate{task: t, input: in, base: base})
	}
	return out
}

// FileNodeLines: in a suite built with BuildConfig.Extra, a lint task on a
// file of at most this many lines runs on the whole file.
const FileNodeLines = 60

// editAt makes the defect of a surveyed site (an F401 site picks one of its
// modules).
func (b *builder) editAt(s site) (Edit, bool) {
	e := Edit{Code: s.Code, Start: s.Start, End: s.End, New: s.New, NoFinalNewline: s.EOFNL != nil && !*s.EOFNL}
	if s.Code == "F401" {
		if len(s.Choices) == 0 {
			return Edit{}, false
		}
		e.New = []string{"import " + s.Choices[b.rng.IntN(len(s.Choices))]}
	}
	return e, true
}

// extraEdits picks up to n more defects of codes other than first's, each
// at least two lines from every edit already chosen.
func (b *builder) extraEdits(byCode map[string][]site, first Edit, n int) []Edit {
	chosen := []Edit{first}
	far := func(s site) bool {
		for _, e := range chosen {
			if s.Start <= max(e.End, e.Start)+2 && e.Start <= max(s.End, s.Start)+2 {
				return false
			}
		}
		return true
	}
	codes := slices.Clone(LintCodes)
	b.rng.Shuffle(len(codes), func(i, j int) { codes[i], codes[j] = codes[j], codes[i] })
	var out []Edit
	for _, code := range codes {
		if len(out) == n {
			break
		}
		if code == first.Code {
			continue
		}
		var ok []site
		for _, s := range byCode[code] {
			if far(s) {
				ok = append(ok, s)
			}
		}
		if len(ok) == 0 {
			continue
		}
		if e, good := b.editAt(ok[b.rng.IntN(len(ok))]); good {
			chosen = append(chosen, e)
			out = append(out, e)
		}
	}
	return out
}

func (b *builder) docCandidates(f srcFile, sf surveyFile, text string) []candidate {
	if !slices.Contains(b.cfg.Ops, OpDocstring) || !b.open(OpDocstring, f.split, "") {
		return nil
	}
	var docs []funcInfo
	seen := map[string]int{}
	for _, fn := range sf.Funcs {
		seen[fn.Name]++
	}
	for _, fn := range sf.Funcs {
		// A name defined twice (a property and its setter) is not one node.
		if len(fn.Doc) == 2 && seen[fn.Name] == 1 && !strings.HasPrefix(fn.Name[strings.LastIndex(fn.Name, ".")+1:], "__") {
			docs = append(docs, fn)
		}
	}
	b.rng.Shuffle(len(docs), func(i, j int) { docs[i], docs[j] = docs[j], docs[i] })
	var out []candidate
	for _, fn := range docs[:min(2, len(docs))] {
		e := Edit{Code: "docstring", Start: fn.Doc[0], End: fn.Doc[1]}
		in, err := ApplyEdit(text, e)
		if err != nil {
			continue
		}
		t := b.newTask(f, text, OpDocstring, e)
		t.Node = nodeOf(sf.Funcs, fn.Name)
		exp := []string{"the file parses; only a docstring is added to " + fn.Name,
			"the docstring is in the file's style (google, numpy or sphinx when the file has none)"}
		if len(fn.Params) > 0 {
			exp = append(exp, "it names the parameters "+strings.Join(fn.Params, ", ")+" and no others")
		}
		if fn.Returns || fn.Generator {
			exp = append(exp, "it describes the return value")
		} else {
			exp = append(exp, "it claims no return value")
		}
		t.Expect = exp
		out = append(out, candidate{task: t, input: in})
	}
	return out
}

// verify keeps the candidates whose injected text the real linters see as
// intended, while their quota is open.
func (b *builder) verify(ctx context.Context, cands []candidate) error {
	if len(cands) == 0 {
		return nil
	}
	type item struct {
		Path string `json:"path"`
		Text string `json:"text"`
	}
	items := make([]item, len(cands))
	for i, c := range cands {
		items[i] = item{Path: c.task.File, Text: c.input}
	}
	var resp struct {
		Reports [][]Report `json:"reports"`
	}
	if err := b.cfg.Python.run(ctx, "check", map[string]any{"items": items, "line_length": b.cfg.LineLength}, &resp); err != nil {
		return err
	}
	if len(resp.Reports) != len(cands) {
		return fmt.Errorf("eval: build: check answered %d texts for %d", len(resp.Reports), len(cands))
	}
	for i, c := range cands {
		t := c.task
		if !b.open(t.Op, t.Split, t.Defect.Code) || !b.wellFormed(t, c, resp.Reports[i]) {
			continue
		}
		k, _ := b.quota(t.Op, t.Split, t.Defect.Code)
		b.have[k]++
		b.tasks = append(b.tasks, t)
	}
	return nil
}

// companion is the code pycodestyle reports together with an injected one
// for the same defect: a tab-indented function in a file indented with
// spaces is also E101 (mixed indentation) to it.
var companion = map[string]string{"W191": "E101"}

func (b *builder) wellFormed(t Task, c candidate, reps []Report) bool {
	counts := map[string]int{}
	for _, r := range reps {
		if r.Code == "E999" {
			return false
		}
		counts[r.Code]++
	}
	if t.Op != OpLint {
		return true
	}
	injected := map[string]bool{}
	for _, e := range t.Edits() {
		injected[e.Code] = true
		injected[companion[e.Code]] = true
	}
	for code, n := range counts {
		if n > c.base[code] && !injected[code] {
			return false
		}
	}
	for _, e := range t.Edits() {
		if counts[e.Code] <= c.base[e.Code] {
			return false
		}
	}
	return true
}

// suite numbers the kept tasks per operation and split, in the order they
// were kept (which the seed decides).
func (b *builder) suite() *Suite {
	s := &Suite{Header: Header{Name: b.cfg.Name, Seed: b.cfg.Seed, LineLength: b.cfg.LineLength, Sources: b.cfg.Sources}}
	n := map[string]int{}
	for _, op := range Ops {
		for _, sp := range Splits {
			for _, t := range b.tasks {
				if t.Op != op || t.Split != sp {
					continue
				}
				n[op+sp]++
				t.ID = fmt.Sprintf("%s-%s-%04d", op, sp, n[op+sp])
				s.Tasks = append(s.Tasks, t)
			}
		}
	}
	return s
}
