package llama

// What the binding (github.com/ollama/ollama/llama v0.17.4) lacks, reached
// directly (docs/INFERENCE.md §2). No header is included and no C is compiled:
// the prototypes below resolve against the llama.cpp objects the binding
// already links into the binary. The C context pointer is read from the
// unexported first field of llama.Context; TestContextLayout guards that
// layout, so an ollama upgrade fails there first.

/*
#include <stdbool.h>
#include <stdint.h>

struct llama_context;
struct llama_vocab;
int llama_vocab_get_attr(const struct llama_vocab * vocab, int32_t token);
void llama_free(struct llama_context * ctx);
float * llama_get_logits_ith(struct llama_context * ctx, int32_t i);
void llama_set_embeddings(struct llama_context * ctx, bool embeddings);
*/
import "C"

import (
	"unsafe"

	ollamallama "github.com/ollama/ollama/llama"
)

// cContext returns the C llama_context of c: the unexported field c at
// offset 0 of llama.Context.
func cContext(c *ollamallama.Context) *C.struct_llama_context {
	return *(**C.struct_llama_context)(unsafe.Pointer(c))
}

// freeContext frees the context's C memory (KV cache, buffers). c must not
// be used afterwards.
func freeContext(c *ollamallama.Context) {
	C.llama_free(cContext(c))
}

// disableEmbeddings turns off the per-output embeddings copy that
// llama.NewContextParams hard-codes on; we only need logits.
func disableEmbeddings(c *ollamallama.Context) {
	C.llama_set_embeddings(cContext(c), C.bool(false))
}

// logitsIth returns the logits row i of the last decode without copying.
// The slice aliases C memory that the next Decode overwrites.
func logitsIth(c *ollamallama.Context, i, nVocab int) []float32 {
	p := C.llama_get_logits_ith(cContext(c), C.int32_t(i))
	if p == nil {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(p)), nVocab)
}

// tokenAttr is llama.cpp's llama_token_attr bit set.
type tokenAttr int32

// Token attributes (llama.h enum llama_token_attr).
const (
	attrUndefined tokenAttr = 0
	attrUnknown   tokenAttr = 1 << 0
	attrUnused    tokenAttr = 1 << 1
	attrNormal    tokenAttr = 1 << 2
	attrControl   tokenAttr = 1 << 3
	attrUser      tokenAttr = 1 << 4
	attrByte      tokenAttr = 1 << 5
)

// vocabAttr returns the attributes of token id.
func vocabAttr(m *ollamallama.Model, id int) tokenAttr {
	v := (*C.struct_llama_vocab)(unsafe.Pointer(m.Vocab()))
	return tokenAttr(C.llama_vocab_get_attr(v, C.int32_t(id)))
}
