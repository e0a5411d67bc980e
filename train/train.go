//go:build llama

// Package train trains FunctionGemma-format models from fleet's own
// training data (`enqueue dataset export`): a small Gemma 3 model from
// scratch, or a LoRA adapter over a given Gemma 3 GGUF (docs/TRAINING.md).
//
// Tokenization and GGUF writing are Go: the records are rendered with
// fleet's renderer and tokenized by llama.cpp exactly as the llama backend
// tokenizes prompts, and the result is written with inference/gguf. Only
// the arithmetic runs in PyTorch (Debian's python3-torch), in a script
// embedded in this package (py/fleet_train.py) that implements llama.cpp's
// gemma3 forward pass. The loss is on the model's spans only.
package train

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"runtime"
	"strings"
)

// Modes of Config.Mode.
const (
	// ModeModel trains a small Gemma 3 model from scratch.
	ModeModel = "model"
	// ModeLoRA trains a LoRA adapter over Config.Base.
	ModeLoRA = "lora"
)

// Shape is the model shape of ModeModel; zero fields are chosen from the
// data (AutoShape).
type Shape struct {
	Embedding   int `json:"embedding"`
	Blocks      int `json:"blocks"`
	FeedForward int `json:"feed_forward"`
	Heads       int `json:"heads"`
	HeadsKV     int `json:"heads_kv"`
	HeadDim     int `json:"head_dim"`
	Context     int `json:"context"`
	// Window is the sliding window of 5 of every 6 layers (llama.cpp's
	// Gemma 3 pattern; 0: every layer attends to the whole context). A
	// window needs at least 6 blocks: the sixth is the global layer.
	Window int `json:"window,omitempty"`
}

// Config configures Run.
type Config struct {
	// Data is the JSONL of `enqueue dataset export` (text or messages).
	Data string
	// Out is the GGUF to write (a model, or an adapter in ModeLoRA).
	Out string
	// Work holds checkpoints and the trainer's files (default Out+".work").
	Work string
	// Mode is ModeModel (default) or ModeLoRA.
	Mode string
	// Vocab is the GGUF whose tokenizer ModeModel uses (its vocabulary is
	// cut to what the data needs).
	Vocab string
	// Base is the model ModeLoRA adapts (its tokenizer is used as is).
	Base  string
	Shape Shape
	// Name is general.name of the output.
	Name string
	// AgentDigest, when set, must prefix every record's agent digest.
	AgentDigest string

	// MaxLen drops records longer than this many tokens (0: keep all);
	// the context written into the GGUF still covers the longest kept.
	MaxLen          int
	Epochs          int
	MaxSteps        int
	BatchTokens     int
	LR              float64
	Seed            int
	DevFraction     float64
	EvalEvery       int
	Patience        int
	CheckpointEvery int
	Threads         int
	LoRARank        int
	LoRAAlpha       float64
	LoRATargets     []string

	// Python is the interpreter (default: one that imports torch).
	Python string
	// Progress receives the progress bar and messages (nil: none).
	Progress io.Writer
	// OnEvent, when set, sees every trainer event.
	OnEvent func(Event)
}

// ErrConfig is wrapped by Config validation errors.
var ErrConfig = errors.New("train: invalid config")

func (c *Config) validate() error {
	bad := func(f string, a ...any) error { return fmt.Errorf("%w: "+f, append([]any{ErrConfig}, a...)...) }
	if c.Data == "" || c.Out == "" {
		return bad("the dataset and the output path are required")
	}
	if !strings.HasSuffix(c.Out, ".gguf") {
		return bad("the output %q must end in .gguf", c.Out)
	}
	if c.Mode == "" {
		c.Mode = ModeModel
	}
	switch c.Mode {
	case ModeModel:
		if c.Vocab == "" {
			return bad("mode model needs a GGUF to take the tokenizer from (-vocab)")
		}
	case ModeLoRA:
		if c.Base == "" {
			return bad("mode lora needs the base model (-base)")
		}
	default:
		return bad("mode %q (want model or lora)", c.Mode)
	}
	if c.Work == "" {
		c.Work = strings.TrimSuffix(c.Out, ".gguf") + ".work"
	}
	def := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	def(&c.Epochs, 20)
	def(&c.BatchTokens, 8192)
	def(&c.EvalEvery, 50)
	def(&c.Patience, 4)
	def(&c.CheckpointEvery, 25)
	def(&c.Threads, min(runtime.NumCPU(), 8))
	def(&c.LoRARank, 8)
	if c.LR == 0 {
		c.LR = 3e-3
		if c.Mode == ModeLoRA {
			c.LR = 2e-3
		}
	}
	if c.LoRAAlpha == 0 {
		c.LoRAAlpha = float64(c.LoRARank)
	}
	if len(c.LoRATargets) == 0 {
		c.LoRATargets = []string{"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"}
	}
	if c.DevFraction == 0 {
		c.DevFraction = 0.1
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	switch {
	case c.Epochs < 0 || c.MaxSteps < 0 || c.BatchTokens < 64:
		return bad("epochs, steps and batch tokens must be positive (batch tokens >= 64)")
	case c.DevFraction < 0 || c.DevFraction >= 1:
		return bad("dev fraction %g outside [0, 1)", c.DevFraction)
	case c.LR <= 0 || c.LR > 1:
		return bad("learning rate %g outside (0, 1]", c.LR)
	case c.LoRARank <= 0:
		return bad("LoRA rank must be positive")
	}
	for _, t := range c.LoRATargets {
		switch t {
		case "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down":
		default:
			return bad("LoRA target %q (want attn_q, attn_k, attn_v, attn_output, ffn_gate, ffn_up or ffn_down)", t)
		}
	}
	return nil
}

// Result is what Run produced.
type Result struct {
	Out string
	// UpToDate says Out already held this training's result (same data,
	// vocabulary and settings): nothing was trained.
	UpToDate  bool
	LossCurve string
	Summary   string
	Steps     int
	BestStep  int
	TrainLoss float64
	DevLoss   float64
	DevAcc    float64
	// InitialDevLoss and InitialDevAcc are the dev split's before
	// training (for a LoRA adapter: the base model's).
	InitialDevLoss float64
	InitialDevAcc  float64
	Stopped        string
	Train, Dev     int
	Params         int64
	Trainable      int64
	TokS           float64
	Metadata       map[string]any
}

// AutoShape picks a model shape for targetTokens target tokens whose
// longest sequence is maxLen tokens: small and fast to train on two
// cores, with the context rounded up from maxLen.
func AutoShape(s Shape, targetTokens, maxLen int) Shape {
	def := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	if targetTokens < 400_000 {
		def(&s.Embedding, 128)
		def(&s.Blocks, 4)
		def(&s.FeedForward, 384)
	} else {
		def(&s.Embedding, 192)
		def(&s.Blocks, 6)
		def(&s.FeedForward, 576)
	}
	def(&s.HeadDim, 32)
	def(&s.Heads, s.Embedding/s.HeadDim)
	def(&s.HeadsKV, 1)
	if s.Context == 0 {
		s.Context = (maxLen + 255) / 256 * 256 * 2
	}
	return s
}

// split assigns sequences to train or dev by a hash of their job id (or
// their index), so the same record stays on the same side.
func split(seqs []Sequence, frac float64, seed int) (train, dev []Sequence) {
	if frac == 0 || len(seqs) < 4 {
		return seqs, nil
	}
	for i, s := range seqs {
		key := s.JobID
		if key == "" {
			key = fmt.Sprintf("#%d", i)
		}
		h := fnv.New64a()
		fmt.Fprintf(h, "%d/%s", seed, key)
		if float64(h.Sum64()%10000)/10000 < frac {
			dev = append(dev, s)
		} else {
			train = append(train, s)
		}
	}
	if len(dev) == 0 {
		dev, train = train[:1], train[1:]
	}
	return train, dev
}

func digestOf(v any) string {
	b, _ := json.Marshal(v)
	h := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(h[:])
}
