//go:build llama

package ollamapeer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/inference/llama"
	"github.com/agentfleet/fleet/inference/remote"
	"github.com/agentfleet/fleet/internal/ollamapeer"
	"github.com/agentfleet/fleet/internal/testutil"
	"github.com/agentfleet/fleet/loop"
)

// benchPeer starts ollama serving the 270M model `make model` writes (or
// FLEET_BENCH_MODEL) as "fleet-bench", one thread.
func benchPeer(b *testing.B) (*ollamapeer.Server, string) {
	b.Helper()
	bin, err := ollamapeer.Binary()
	if err != nil {
		b.Skipf("ollama peer unavailable: %v", err)
	}
	model := os.Getenv("FLEET_BENCH_MODEL")
	if model == "" {
		model, _ = filepath.Abs(filepath.Join("..", "..", "models", "functiongemma-270m-random-q8_0.gguf"))
	}
	if _, err := os.Stat(model); err != nil {
		b.Skipf("no benchmark model at %s (run make model)", model)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s, err := ollamapeer.Start(ctx, bin, b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(s.Stop)
	if err := s.Create(ctx, "fleet-bench", model, 1); err != nil {
		b.Fatal(err)
	}
	return s, model
}

// benchMessages is a lint-sized first turn: the lint agent's system prompt
// and the demo file as node context; run makes each prompt new to both
// servers' caches.
func benchMessages(b *testing.B, run int) (*agents.Definition, []fleettype.Message) {
	defs, err := agents.LoadDir(filepath.Join("..", "..", "agents"))
	if err != nil {
		b.Fatal(err)
	}
	def := defs["lint"]
	src, err := os.ReadFile(filepath.Join("..", "..", "testdata", "demo", "src", "inventory", "stock.py"))
	if err != nil {
		b.Fatal(err)
	}
	return def, []fleettype.Message{
		{Role: fleettype.RoleSystem, Content: fmt.Sprintf("Run %d. %s", run, def.InitialContext.SystemPrompt)},
		{Role: fleettype.RoleUser, Content: "File: src/inventory/stock.py\n```python\n" + string(src) + "```"},
	}
}

// ollamaAnswer is one /api/chat answer's counters (durations 0 when
// ollama aborted the generation: it repeats one token on random weights).
type ollamaAnswer struct {
	promptN, genN int
	promptD, genD time.Duration
}

// ollamaChat asks ollama's native chat API once, sampling up to 64 tokens.
func ollamaChat(b *testing.B, url string, msgs []fleettype.Message, seed int) ollamaAnswer {
	var am []map[string]string
	for _, m := range msgs {
		am = append(am, map[string]string{"role": string(m.Role), "content": m.Content})
	}
	body, _ := json.Marshal(map[string]any{"model": "fleet-bench", "messages": am, "stream": false,
		"options": map[string]any{"num_thread": 1, "num_predict": 64, "temperature": 0.8, "top_k": 40, "seed": seed, "num_ctx": 4096}})
	resp, err := http.Post(url+"/api/chat", "application/json", bytes.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		PromptEvalCount    int   `json:"prompt_eval_count"`
		PromptEvalDuration int64 `json:"prompt_eval_duration"`
		EvalCount          int   `json:"eval_count"`
		EvalDuration       int64 `json:"eval_duration"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("ollama /api/chat: status %d, %v", resp.StatusCode, err)
	}
	return ollamaAnswer{r.PromptEvalCount, r.EvalCount, time.Duration(r.PromptEvalDuration), time.Duration(r.EvalDuration)}
}

// rate is n per d in 1/s (0 when d is).
func rate(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// prefillRound is one interleaved round's prefill of the same new prompt.
type prefillRound struct {
	ref          int                   // new tokens by the reference tokenizer (fleet's, llama.cpp's)
	fleetD       time.Duration         // fleet's prefill of them
	ans          ollamaAnswer          // ollama's answer
	load         ollamapeer.PromptLoad // what ollama's log says it computed
	fleetDecode  float64               // generated tokens over the whole generation
	ollamaDecode float64               // ollama's figure: its eval_duration leaves sampling out
	// fleetDecodeNoSampling leaves fleet's sampling out too: the same
	// measure as ollama's.
	fleetDecodeNoSampling float64
}

func (r prefillRound) sameRatio() float64 { return r.ans.promptD.Seconds() / r.fleetD.Seconds() }
func (r prefillRound) tokenRatio() float64 {
	return rate(r.ref, r.fleetD) / rate(r.load.Remaining, r.ans.promptD)
}

// BenchmarkPeer prints, in one run: fleet's llama.cpp backend against
// ollama serving the same GGUF on one thread (prefill and decode tok/s,
// best of 3 each, interleaved), and the same lint job (strict, several
// turns, real tools) run three times through fleet's local backend and
// through fleet's remote backend against that ollama: wall time and
// effective tokens/s per job. Run it with -benchtime 1x.
func BenchmarkPeer(b *testing.B) {
	srv, model := benchPeer(b)
	out := &strings.Builder{}
	pf := func(format string, a ...any) { fmt.Fprintf(out, format, a...) }
	ctx := context.Background()

	// 1. Raw speed, interleaved: each round prefills the same new prompt
	// with fleet at its default prefill batch (512, ollama's too), with
	// fleet at the low-memory 128, then with ollama, and samples up to 64
	// tokens on each (temperature 0.8, top-k 40: greedy decoding of random
	// weights repeats a token, and ollama then aborts the generation
	// without counters). The first round is a warm-up.
	//
	// What is counted: the new tokens of the prompt. Each round's prompt
	// differs from the one before a few tokens in, so both keep that prefix
	// cached. fleet reports the tokens it computed. ollama's API counts the
	// whole prompt, cached tokens included, and its tokenizer makes more
	// tokens of the same text; its log (ollamapeer.PromptLoad) says how many
	// it computed. Three rates follow: the same new text per second (the
	// reference token count over each side's time: what a caller waits
	// for), tokens computed per second (the engines), and ollama's own
	// figure.
	const rounds = 8
	pf("load average %s\n", testutil.LoadAvg())
	backends := map[int]*llama.Backend{}
	for _, bs := range []int{128, 512} {
		be, err := llama.New(llama.Config{Model: llama.ModelRef{Path: model}, ContextSize: 4096, BatchSize: bs, MaxTokens: 64, Lenient: true,
			Sampling: llama.Sampling{Temperature: 0.8, TopK: 40, Seed: 1}})
		if err != nil {
			b.Fatal(err)
		}
		defer be.Close()
		backends[bs] = be
	}
	// One slot per backend for all rounds, as a worker keeps its slots:
	// a new slot per round would make fleet's prefill pay the first touch
	// of its context's KV cache and compute buffer pages every round,
	// which ollama's long-lived runner does not.
	slots := map[*llama.Backend]*llama.Slot{}
	for _, be := range backends {
		slot, err := be.NewSlot()
		if err != nil {
			b.Fatal(err)
		}
		defer slot.Close()
		slots[be] = slot
	}
	// fleetRun also returns the time the slot spent sampling, which
	// ollama's eval_duration leaves out of its own decode figure.
	fleetRun := func(be *llama.Backend, msgs []fleettype.Message) (fleettype.Usage, time.Duration) {
		s0 := slots[be].SamplingTime()
		resp, err := slots[be].Complete(ctx, &loop.Request{Messages: msgs})
		sampled := slots[be].SamplingTime() - s0
		if err != nil {
			var bad *loop.InvalidResponseError
			if !errors.As(err, &bad) {
				b.Fatal(err)
			}
			return bad.Usage, sampled
		}
		return resp.Usage, sampled
	}
	var rs []prefillRound
	var best128 float64
	var fleetPrompt int
	for run := range rounds + 1 {
		_, msgs := benchMessages(b, run)
		u, sampled := fleetRun(backends[512], msgs)
		u128, _ := fleetRun(backends[128], msgs)
		ans := ollamaChat(b, srv.URL, msgs, run)
		loads, err := srv.PromptLoads()
		if err != nil || len(loads) == 0 {
			b.Fatalf("ollama's log %s: no prompt load (%v): the bench needs its debug lines", srv.LogPath(), err)
		}
		if run == 0 {
			continue // warm-up: page in the weights on both sides
		}
		ld := loads[len(loads)-1]
		if ld.Prompt != ans.promptN || ans.promptD <= 0 {
			b.Fatalf("ollama round %d: log says prompt %d, API %d tokens in %v", run, ld.Prompt, ans.promptN, ans.promptD)
		}
		rs = append(rs, prefillRound{ref: u.PromptTokens - u.CachedTokens, fleetD: u.PromptDuration,
			ans: ans, load: ld,
			fleetDecode: rate(u.CompletionTokens, u.CompletionDuration), ollamaDecode: rate(ans.genN, ans.genD),
			fleetDecodeNoSampling: rate(u.CompletionTokens, u.CompletionDuration-sampled)})
		best128 = max(best128, rate(u128.PromptTokens-u128.CachedTokens, u128.PromptDuration))
		fleetPrompt = u.PromptTokens
	}
	reportPrefill(b, pf, rs, best128, fleetPrompt)

	// 2. The same multi-turn agent job, local vs remote. The job replays
	// a fixed lint conversation (the lint agent's system prompt, tools and
	// node context, then five turns of calls and tool results), so both
	// backends get exactly the same requests; each answers every turn
	// itself (local: strict mode, greedy; remote: ollama, greedy, 256
	// tokens). Three jobs per side, one after the other: the second and
	// third can reuse the first one's KV cache on both sides.
	local, err := llama.New(llama.Config{Model: llama.ModelRef{Path: model}, ContextSize: 4096, MaxTokens: 256})
	if err != nil {
		b.Fatal(err)
	}
	defer local.Close()
	lslot, err := local.NewSlot()
	if err != nil {
		b.Fatal(err)
	}
	counterSlot, err := local.NewSlot()
	if err != nil {
		b.Fatal(err)
	}
	zero := 0.0
	rm, err := remote.New(remote.Config{BaseURL: srv.URL + "/v1", Model: "fleet-bench", MaxTokens: 256, Temperature: &zero, MaxRetries: -1})
	if err != nil {
		b.Fatal(err)
	}
	turns := lintJob(b)
	const jobs = 3
	var wall [2]time.Duration
	var tokens [2]int
	for i, side := range []struct {
		name  string
		model loop.Model
	}{{"local (fleet llama.cpp, strict)", lslot}, {"remote (fleet -> ollama)", rm}} {
		for j := range jobs {
			t0 := time.Now()
			n, gen, forced := 0, 0, 0
			for _, req := range turns {
				c, err := counterSlot.CountTokens(ctx, req)
				if err != nil {
					b.Fatal(err)
				}
				n += c
				resp, err := side.model.Complete(ctx, req)
				var bad *loop.InvalidResponseError
				switch {
				case err == nil:
					gen, forced = gen+resp.Usage.CompletionTokens, forced+resp.Usage.ForcedTokens
				case errors.As(err, &bad):
					gen += bad.Usage.CompletionTokens
				default:
					b.Fatal(err)
				}
			}
			took := time.Since(t0)
			wall[i] += took
			tokens[i] += n
			pf("  %-32s job %d: %6.2f s for %d turns: %5d context tokens = %5.0f tok/s; %4d generated as reported (%3d forced)\n",
				side.name, j+1, took.Seconds(), len(turns), n, float64(n)/took.Seconds(), gen, forced)
		}
	}
	lt, rt := wall[0].Seconds()/jobs, wall[1].Seconds()/jobs
	le, re := float64(tokens[0])/wall[0].Seconds(), float64(tokens[1])/wall[1].Seconds()
	pf("lint job (%d turns), mean of %d: local %.2f s, %.0f effective tok/s; remote %.2f s, %.0f effective tok/s\n", len(turns), jobs, lt, le, rt, re)
	pf("  local vs remote: %.2fx faster per job (target >= 1.5x)\n", rt/lt)
	b.ReportMetric(rt/lt, "job-local-speedup")
	b.ReportMetric(0, "ns/op")
	pf("load average %s\n", testutil.LoadAvg())
	fmt.Print("\n--- fleet vs ollama ---\n" + out.String())
}

// lintJob returns the requests of a five-turn lint job on the demo file:
// run_linter, two apply_fix calls (the second after a [Context] message),
// read_current_file, then the model's last turn.
func lintJob(b *testing.B) []*loop.Request {
	def, msgs := benchMessages(b, 0)
	msgs[0].Content = def.InitialContext.SystemPrompt
	var tools []fleettype.ToolSpec
	for _, tl := range def.Tools {
		tools = append(tools, fleettype.ToolSpec{Name: tl.Name, Description: tl.Description, Parameters: tl.Parameters})
	}
	steps := []struct{ name, args, result, context string }{
		{"run_linter", `{}`, `{"outcome":"ok","result":{"issues":[{"code":"W291","line":12,"message":"trailing whitespace","fixable":true},{"code":"F401","line":3,"message":"'os' imported but unused","fixable":true},{"code":"E501","line":40,"message":"line too long (97 > 88)","fixable":false}]},"summary":"3 issues, 2 fixable"}`, ""},
		{"apply_fix", `{"issue_code":"W291","line_number":0}`, `{"outcome":"ok","result":{"fixed":1,"remaining":[{"code":"F401","line":3},{"code":"E501","line":40}]},"summary":"fixed W291 on 1 line"}`, "ruff: line-length 88, select E,W,F"},
		{"apply_fix", `{"issue_code":"F401","line_number":3}`, `{"outcome":"ok","result":{"fixed":1,"remaining":[{"code":"E501","line":39}]},"summary":"removed the unused import"}`, "ruff: line-length 88, select E,W,F"},
		{"read_current_file", `{}`, `{"outcome":"ok","result":{"path":"src/inventory/stock.py","lines":58},"summary":"58 lines"}`, ""},
	}
	var reqs []*loop.Request
	for i := 0; ; i++ {
		reqs = append(reqs, &loop.Request{Messages: append([]fleettype.Message(nil), msgs...), Tools: tools, CacheKey: def.Name})
		if i == len(steps) {
			return reqs
		}
		st := steps[i]
		id := fmt.Sprintf("call_%d", i+1)
		msgs = append(msgs, fleettype.Message{Role: fleettype.RoleAssistant, ToolCalls: []fleettype.ToolCall{{ID: id, Name: st.name, Arguments: json.RawMessage(st.args)}}})
		if st.context != "" {
			msgs = append(msgs, fleettype.Message{Role: fleettype.RoleUser, Content: "[Context] " + st.context})
		}
		msgs = append(msgs, fleettype.Message{Role: fleettype.RoleTool, ToolCallID: id, Name: st.name, Content: st.result})
	}
}

// reportPrefill prints section 1 of BenchmarkPeer and reports its ratios.
func reportPrefill(b *testing.B, pf func(string, ...any), rs []prefillRound, best128 float64, fleetPrompt int) {
	var same, tok, dec []float64
	var fSame, oSame, fTok, oTok, oAPI, fDec, oDec, fDecNS float64
	for _, r := range rs {
		same, tok = append(same, r.sameRatio()), append(tok, r.tokenRatio())
		fSame, oSame = max(fSame, rate(r.ref, r.fleetD)), max(oSame, rate(r.ref, r.ans.promptD))
		fTok, oTok = fSame, max(oTok, rate(r.load.Remaining, r.ans.promptD))
		oAPI = max(oAPI, rate(r.ans.promptN, r.ans.promptD))
		fDec, oDec, fDecNS = max(fDec, r.fleetDecode), max(oDec, r.ollamaDecode), max(fDecNS, r.fleetDecodeNoSampling)
		if r.fleetDecodeNoSampling > 0 && r.ollamaDecode > 0 {
			dec = append(dec, r.fleetDecodeNoSampling/r.ollamaDecode)
		}
	}
	last := rs[len(rs)-1]
	pf("same GGUF, one thread, %d interleaved rounds; best round of each side, then the median of the per-round ratios (each round measures both back to back):\n", len(rs))
	pf("  the prompt: fleet %d tokens (the reference tokenizer), ollama %d (<bos> doubled: %v; whitespace runs split)\n",
		fleetPrompt, last.load.Prompt, last.load.DoubleBOS)
	pf("  its new text per round: %d tokens by the reference tokenizer; fleet computes %d, ollama %d (its cache kept %d of its %d)\n",
		last.ref, last.ref, last.load.Remaining, last.load.Used, last.load.Prompt)
	pf("  prefill, same text      fleet %6.1f tok/s  ollama %6.1f tok/s   fleet/ollama %.2f, per round median %.2f %s\n",
		fSame, oSame, fSame/oSame, median(same), fmtRatios(same))
	pf("  prefill, tokens computed fleet %6.1f tok/s  ollama %6.1f tok/s   fleet/ollama %.2f, per round median %.2f %s\n",
		fTok, oTok, fTok/oTok, median(tok), fmtRatios(tok))
	pf("  prefill, ollama's API figure (prompt_eval_count counts cached tokens): %.1f tok/s; fleet at batch 128: %.1f tok/s\n", oAPI, best128)
	pf("  decode, sampling left out as ollama's eval_duration does: fleet %6.1f tok/s  ollama %6.1f tok/s   fleet/ollama %.2f, per round median %.2f %s\n",
		fDecNS, oDec, fDecNS/oDec, median(dec), fmtRatios(dec))
	pf("  decode, fleet with its sampling (top-k of %d logits per token): %.1f tok/s\n", 262144, fDec)
	b.ReportMetric(median(same), "prefill-fleet/ollama")
	b.ReportMetric(median(tok), "prefill-computed-fleet/ollama")
	b.ReportMetric(median(dec), "decode-fleet/ollama")
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	w := slices.Clone(v)
	slices.Sort(w)
	if len(w)%2 == 1 {
		return w[len(w)/2]
	}
	return (w[len(w)/2-1] + w[len(w)/2]) / 2
}

func fmtRatios(v []float64) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = fmt.Sprintf("%.2f", x)
	}
	return "[" + strings.Join(parts, " ") + "]"
}
