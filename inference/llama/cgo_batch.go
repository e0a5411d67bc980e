package llama

// Context parameters the binding's NewContextParams does not expose
// (docs/INFERENCE.md §2): a batched context needs a unified KV cache
// (kv_unified, so that a sequence copy is a metadata update and a shared
// prefix's cells are stored once) and one physical batch as large as a
// step (n_batch = n_ubatch). struct fleet_context_params mirrors llama.h's
// struct llama_context_params of the vendored llama.cpp (ollama v0.17.4,
// llama.cpp ec98e2002) field for field; enums are C ints and callbacks are
// pointers. TestContextParamsLayout checks the mirror against values the
// binding writes, so an upgrade that moves a field fails there first.

/*
#include <stdbool.h>
#include <stdint.h>

struct fleet_context_params {
	uint32_t n_ctx;
	uint32_t n_batch;
	uint32_t n_ubatch;
	uint32_t n_seq_max;
	int32_t  n_threads;
	int32_t  n_threads_batch;
	int      rope_scaling_type;
	int      pooling_type;
	int      attention_type;
	int      flash_attn_type;
	float    rope_freq_base;
	float    rope_freq_scale;
	float    yarn_ext_factor;
	float    yarn_attn_factor;
	float    yarn_beta_fast;
	float    yarn_beta_slow;
	uint32_t yarn_orig_ctx;
	float    defrag_thold;
	void *   cb_eval;
	void *   cb_eval_user_data;
	int      type_k;
	int      type_v;
	void *   abort_callback;
	void *   abort_callback_data;
	bool     embeddings;
	bool     offload_kqv;
	bool     no_perf;
	bool     op_offload;
	bool     swa_full;
	bool     kv_unified;
};
*/
import "C"

import (
	"unsafe"

	ollamallama "github.com/ollama/ollama/llama"
	"github.com/ollama/ollama/ml"
)

// contextParams is a view of the C struct inside the binding's
// ContextParams (its only field).
type contextParams = C.struct_fleet_context_params

func paramsOf(p *ollamallama.ContextParams) *contextParams {
	return (*contextParams)(unsafe.Pointer(p))
}

// batchedContextParams returns the parameters of a batched context:
// nCtx KV cells shared by nSeq sequences (a unified cache), one physical
// batch of up to batch tokens, threads threads.
func batchedContextParams(nCtx, batch, nSeq, threads int) ollamallama.ContextParams {
	p := ollamallama.NewContextParams(nCtx, batch, nSeq, threads, ml.FlashAttentionAuto, "")
	cp := paramsOf(&p)
	cp.n_batch = C.uint32_t(batch)
	cp.n_ubatch = C.uint32_t(batch)
	cp.kv_unified = C.bool(true)
	cp.embeddings = C.bool(false)
	return p
}

// paramsMirror is what TestContextParamsLayout reads back through the
// mirror.
type paramsMirror struct {
	nCtx, nBatch, nUbatch, nSeqMax, threads, threadsBatch int
	flash, typeK                                          int
	embeddings, swaFull, kvUnified                        bool
	size                                                  uintptr
}

func readParams(p *ollamallama.ContextParams) paramsMirror {
	cp := paramsOf(p)
	return paramsMirror{
		nCtx: int(cp.n_ctx), nBatch: int(cp.n_batch), nUbatch: int(cp.n_ubatch), nSeqMax: int(cp.n_seq_max),
		threads: int(cp.n_threads), threadsBatch: int(cp.n_threads_batch),
		flash: int(cp.flash_attn_type), typeK: int(cp.type_k),
		embeddings: bool(cp.embeddings), swaFull: bool(cp.swa_full), kvUnified: bool(cp.kv_unified),
		size: unsafe.Sizeof(*cp),
	}
}
