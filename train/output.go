//go:build llama

package train

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/agentfleet/fleet/inference/gguf"
	"github.com/agentfleet/fleet/inference/modelstore"
)

// Metadata keys written into the GGUF (and shown by `enqueue model push`).
const (
	MetaPrefix      = modelstore.TrainPrefix
	MetaDataDigest  = MetaPrefix + "data_digest"
	MetaAgentDigest = MetaPrefix + "agent_digest"
	MetaVocabDigest = MetaPrefix + "vocab_digest"
	MetaBase        = MetaPrefix + "base"
	MetaParams      = MetaPrefix + "hyperparameters"
	MetaTrainLoss   = MetaPrefix + "train_loss" // mean batch loss of the last 10 steps
	MetaDevLoss     = MetaPrefix + "dev_loss"
	MetaDevAcc      = MetaPrefix + "dev_token_accuracy"
	MetaInitialDev  = MetaPrefix + "initial_dev_loss"
	MetaSteps       = MetaPrefix + "steps"
	MetaStopped     = MetaPrefix + "stopped"
	MetaRecords     = MetaPrefix + "records"
	MetaFinished    = MetaPrefix + "finished_at"
	// MetaConfig identifies data, vocabulary and settings together: a
	// second run with the same ones finds the output up to date.
	MetaConfig = MetaPrefix + "config_digest"
	// MetaEvalScore is written by `fleet-train eval -record` (passed/total,
	// operations, split and suite); absent until then.
	MetaEvalScore = MetaPrefix + "eval_score"
)

func metadata(cfg Config, ds *Dataset, v *gguf.Vocab, s gguf.Spec, r *Result) map[string]any {
	hp := fmt.Sprintf("mode=%s embedding=%d blocks=%d ff=%d heads=%d/%d head_dim=%d context=%d vocab=%d lr=%g epochs=%d max_steps=%d batch_tokens=%d seed=%d dev_fraction=%g patience=%d",
		cfg.Mode, s.Embedding, s.Blocks, s.FeedForward, s.Heads, s.HeadsKV, s.HeadDim, s.ContextLength, len(v.Tokens),
		cfg.LR, cfg.Epochs, cfg.MaxSteps, cfg.BatchTokens, cfg.Seed, cfg.DevFraction, cfg.Patience)
	if cfg.Mode == ModeLoRA {
		hp += fmt.Sprintf(" lora_rank=%d lora_alpha=%g lora_targets=%s", cfg.LoRARank, cfg.LoRAAlpha, strings.Join(cfg.LoRATargets, ","))
	}
	m := map[string]any{
		MetaDataDigest:  ds.Digest,
		MetaAgentDigest: ds.AgentDigest,
		MetaVocabDigest: VocabDigest(v),
		MetaParams:      hp,
		MetaTrainLoss:   float32(r.TrainLoss),
		MetaDevLoss:     float32(r.DevLoss),
		MetaDevAcc:      float32(r.DevAcc),
		MetaInitialDev:  float32(r.InitialDevLoss),
		MetaSteps:       uint32(r.Steps),
		MetaStopped:     r.Stopped,
		MetaRecords:     fmt.Sprintf("train=%d dev=%d", r.Train, r.Dev),
		MetaFinished:    time.Now().UTC().Format(time.RFC3339),
	}
	if cfg.Mode == ModeLoRA {
		m[MetaBase] = cfg.Base
	}
	for k, v := range m {
		if f, ok := v.(float32); ok && f != f {
			delete(m, k) // NaN: not measured
		}
	}
	return m
}

// writeOutput writes the trained model or adapter atomically.
func writeOutput(cfg Config, s gguf.Spec, v *gguf.Vocab, out map[string]stTensor, meta map[string]any) error {
	names := make([]string, 0, len(out))
	for n := range out {
		names = append(names, n)
	}
	sort.Strings(names)
	ts := make([]gguf.Tensor, 0, len(out))
	for _, n := range names {
		ts = append(ts, gguf.Tensor{Name: n, Shape: toGGUFShape(out[n].Shape), Data: out[n].Data})
	}
	if cfg.Mode == ModeLoRA {
		return gguf.WriteLoRAFile(cfg.Out, gguf.LoRA{Name: s.Name + "-lora", Alpha: float32(cfg.LoRAAlpha), Tensors: ts, Metadata: meta})
	}
	meta["general.description"] = fmt.Sprintf("trained by fleet (package train) on %v records of %v", meta[MetaRecords], meta[MetaDataDigest])
	return gguf.WriteTrainedFile(cfg.Out, gguf.Trained{Spec: s, Vocab: v, Tensors: ts, Metadata: meta})
}

// writeBase writes the base model's tensors as F32 for the trainer. The
// base must be a tied-output Gemma 3 with exactly the tensors fleet's
// trainer models.
func writeBase(path string, m *gguf.Model) error {
	ts, err := m.Tensors()
	if err != nil {
		return err
	}
	want := gguf.TrainedTensorShapes(m.Spec)
	out := map[string]stTensor{}
	for _, t := range ts {
		if _, ok := want[t.Name]; !ok {
			return fmt.Errorf("%w: %s: tensor %s is not part of the Gemma 3 shape fleet trains (an untied output or another variant)", gguf.ErrUnsupported, m.Path, t.Name)
		}
		out[t.Name] = stTensor{Shape: toGGUFShape(t.Shape), Data: t.Data}
	}
	if len(out) != len(want) {
		return fmt.Errorf("%w: %s: %d of the %d Gemma 3 tensors", gguf.ErrUnsupported, m.Path, len(out), len(want))
	}
	return writeSafetensors(path, out)
}
