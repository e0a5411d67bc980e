# The Gemma 3 decoder of fleet's trainer (package train): llama.cpp's gemma3
# graph (src/models/gemma3.cpp) in plain PyTorch.
#
# Embeddings scaled by sqrt(d); per layer RMS norm, Q/K/V, per-head RMS norm
# of Q and K, NEOX RoPE, Q scaled by 1/sqrt(head_dim), causal attention
# (optionally a sliding window on 5 of every 6 layers with RoPE base 10000),
# output projection, post-attention norm, residual, FFN norm,
# down(gelu_tanh(gate(x)) * up(x)), post-FFN norm, residual; final norm;
# logits through the tied embedding. Norm weights are stored as llama.cpp
# reads them (the multiplier itself, Hugging Face's 1 + w).
#
# Two ways of computing the same function cheaper (docs/TRAINING.md):
# - a sliding-window layer attends in bands (each block of `window` queries
#   against its own and the previous block's keys), so its cost grows with
#   the window, not the sequence;
# - training needs the last layer's output only where a target is
#   predicted, so hidden(toks, sel) runs the last layer's queries, FFN and
#   final norm at the selected positions only (keys and values at all);
# - the rows of a batch of one agent's records start with the same tokens
#   (the system prompt and the tool declarations), so hidden(..., prefix=P)
#   computes those P positions once for the batch, and every row's other
#   positions attend to the one copy of their keys and values.
import math

import torch
import torch.nn.functional as F


class RMSNorm(torch.nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class LoRALinear(torch.nn.Module):
    """A frozen weight plus (alpha/r)·B·A, llama.cpp's LoRA."""

    def __init__(self, base, rank, alpha):
        super().__init__()
        self.base = base
        base.weight.requires_grad_(False)
        out_f, in_f = base.weight.shape
        self.lora_a = torch.nn.Parameter(torch.empty(rank, in_f))
        self.lora_b = torch.nn.Parameter(torch.zeros(out_f, rank))
        torch.nn.init.kaiming_uniform_(self.lora_a, a=math.sqrt(5))
        self.scale = alpha / rank

    def forward(self, x):
        return self.base(x) + (x @ self.lora_a.t() @ self.lora_b.t()) * self.scale


def linear(i, o):
    return torch.nn.Linear(i, o, bias=False)


def attend_full(q, k, v, window, q0=0):
    """q: (B, H, Tq, hd), k, v: (B, H, Tk, hd), query i at position q0+i,
    key j at position j. Causal attention, keys within window when
    window > 0."""
    qp = torch.arange(q.shape[2])[:, None] + q0
    kp = torch.arange(k.shape[2])[None, :]
    mask = kp > qp
    if window > 0:
        mask = mask | (qp - kp >= window)
    att = (q @ k.transpose(-1, -2)).masked_fill(mask, float("-inf"))
    return att.softmax(-1) @ v


def attend_band(q, k, v, W):
    """The same as attend_full(q, k, v, W) in O(T·W): queries in blocks of
    W, each against the keys of its block and the one before."""
    B, H, T, hd = q.shape
    n = (T + W - 1) // W
    pad = n * W - T
    if pad:
        z = q.new_zeros(B, H, pad, hd)
        q, k, v = torch.cat([q, z], 2), torch.cat([k, z], 2), torch.cat([v, z], 2)
    z = q.new_zeros(B, H, W, hd)
    kb = torch.cat([z, k], 2).view(B, H, n + 1, W, hd)
    vb = torch.cat([z, v], 2).view(B, H, n + 1, W, hd)
    kk = torch.cat([kb[:, :, :-1], kb[:, :, 1:]], 3)  # (B, H, n, 2W, hd)
    vv = torch.cat([vb[:, :, :-1], vb[:, :, 1:]], 3)
    qb = q.view(B, H, n, W, hd)
    s = qb @ kk.transpose(-1, -2)  # (B, H, n, W, 2W)
    i = torch.arange(W)[:, None]
    j = torch.arange(2 * W)[None, :]
    # query b·W+i sees key (b-1)·W+j when 0 <= W+i-j < W; block 0's first W
    # keys are padding
    mask = ~((j > i) & (j <= i + W))
    first = mask | (j < W)
    m = mask[None].expand(n, W, 2 * W).clone()
    m[0] = first
    s = s.masked_fill(m, float("-inf"))
    o = (s.softmax(-1) @ vv).view(B, H, n * W, hd)
    return o[:, :, :T]


class Block(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        d, hd = c["embedding"], c["head_dim"]
        self.c = c
        self.attn_norm = RMSNorm(d, c["eps"])
        self.attn_q = linear(d, c["heads"] * hd)
        self.attn_k = linear(d, c["heads_kv"] * hd)
        self.attn_v = linear(d, c["heads_kv"] * hd)
        self.attn_output = linear(c["heads"] * hd, d)
        self.attn_q_norm = RMSNorm(hd, c["eps"])
        self.attn_k_norm = RMSNorm(hd, c["eps"])
        self.post_attention_norm = RMSNorm(d, c["eps"])
        self.ffn_norm = RMSNorm(d, c["eps"])
        self.ffn_gate = linear(d, c["feed_forward"])
        self.ffn_up = linear(d, c["feed_forward"])
        self.ffn_down = linear(c["feed_forward"], d)
        self.post_ffw_norm = RMSNorm(d, c["eps"])

    def qkv(self, x, cos, sin):
        c = self.c
        B, T, _ = x.shape
        hd, H, KV = c["head_dim"], c["heads"], c["heads_kv"]
        h = self.attn_norm(x)
        q = self.attn_q_norm(self.attn_q(h).view(B, T, H, hd))
        k = self.attn_k_norm(self.attn_k(h).view(B, T, KV, hd))
        v = self.attn_v(h).view(B, T, KV, hd)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        q = q * (1.0 / math.sqrt(hd))
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if KV != H:
            k = k.repeat_interleave(H // KV, dim=1)
            v = v.repeat_interleave(H // KV, dim=1)
        return q, k, v

    def rest(self, x, o):
        x = x + self.post_attention_norm(self.attn_output(o))
        h = self.ffn_norm(x)
        f = self.ffn_down(F.gelu(self.ffn_gate(h), approximate="tanh") * self.ffn_up(h))
        return x + self.post_ffw_norm(f)

    def forward(self, x, cos, sin, window):
        B, T, _ = x.shape
        q, k, v = self.qkv(x, cos, sin)
        if window > 0 and T > 2 * window:
            o = attend_band(q, k, v, window)
        else:
            o = attend_full(q, k, v, window)
        return self.rest(x, o.transpose(1, 2).reshape(B, T, -1))

    def forward_split(self, xp, xs, cos, sin, window):
        """The layer over a prefix shared by the batch's rows, xp (1, P, d),
        and each row's own positions after it, xs (B, S, d)."""
        P, (B, S, _) = xp.shape[1], xs.shape
        qp, kp, vp = self.qkv(xp, cos[:, :P], sin[:, :P])
        qs, ks, vs = self.qkv(xs, cos[:, P:], sin[:, P:])
        if window > 0 and P > 2 * window:
            op = attend_band(qp, kp, vp, window)
        else:
            op = attend_full(qp, kp, vp, window)
        # the suffix sees the last window-1 prefix positions (all of them
        # without a window)
        tail = min(P, window) if window > 0 else P
        kc = torch.cat([kp[:, :, P - tail:].expand(B, -1, -1, -1), ks], 2)
        vc = torch.cat([vp[:, :, P - tail:].expand(B, -1, -1, -1), vs], 2)
        if window > 0 and tail + S > 2 * window:
            qc = torch.cat([qs.new_zeros(B, qs.shape[1], tail, qs.shape[3]), qs], 2)
            os_ = attend_band(qc, kc, vc, window)[:, :, tail:]
        else:
            os_ = attend_full(qs, kc, vc, window, q0=tail)
        return (self.rest(xp, op.transpose(1, 2).reshape(1, P, -1)),
                self.rest(xs, os_.transpose(1, 2).reshape(B, S, -1)))

    def forward_at(self, x, cos, sin, window, sel):
        """The layer's output at the positions sel (B, T) marks only, as
        (N, d) in row-major order of sel."""
        q, k, v = self.qkv(x, cos, sin)
        outs = []
        for b in range(x.shape[0]):
            t = sel[b].nonzero().flatten()
            if t.numel() == 0:
                continue
            kpos = torch.arange(x.shape[1])
            mask = kpos[None, :] > t[:, None]
            if window > 0:
                mask = mask | (t[:, None] - kpos[None, :] >= window)
            s = (q[b][:, t] @ k[b].transpose(-1, -2)).masked_fill(mask, float("-inf"))
            outs.append((s.softmax(-1) @ v[b]).transpose(0, 1).reshape(t.numel(), -1))
        if not outs:
            return x.new_zeros(0, x.shape[-1])
        return self.rest(x[sel], torch.cat(outs, 0))


def rope(x, cos, sin):
    # NEOX: the first and second halves of each head are the pairs.
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def rope_tables(T, hd, base):
    inv = base ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
    return ang.cos().float()[None, :, None, :], ang.sin().float()[None, :, None, :]


class Gemma3(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.token_embd = torch.nn.Embedding(c["vocab"], c["embedding"])
        self.blocks = torch.nn.ModuleList([Block(c) for _ in range(c["blocks"])])
        self.output_norm = RMSNorm(c["embedding"], c["eps"])

    def is_swa(self, il):
        return self.c["sliding_window"] > 0 and il % 6 < 5

    def hidden(self, toks, sel=None, prefix=0):
        """The final hidden states (B, T, d); with sel, a (B, T) bool mask,
        only those positions', as (N, d). prefix: the first positions every
        row has the same tokens at (none of them selected)."""
        c = self.c
        B, T = toks.shape
        scale = math.sqrt(c["embedding"])
        g = rope_tables(T, c["head_dim"], c["rope_base"])
        l = rope_tables(T, c["head_dim"], 10000.0)
        last = len(self.blocks) - 1
        P = prefix if B > 1 and 0 < prefix < T else 0
        if P:
            xp = self.token_embd(toks[:1, :P]) * scale
            xs = self.token_embd(toks[:, P:]) * scale
        else:
            x = self.token_embd(toks) * scale
        for il, blk in enumerate(self.blocks):
            cs, w = (l, c["sliding_window"]) if self.is_swa(il) else (g, 0)
            if P and (sel is None or il < last):
                xp, xs = blk.forward_split(xp, xs, cs[0], cs[1], w)
                continue
            if P:
                x, P = torch.cat([xp.expand(B, -1, -1), xs], 1), 0
            if sel is not None and il == last:
                return self.output_norm(blk.forward_at(x, cs[0], cs[1], w, sel))
            x = blk(x, cs[0], cs[1], w)
        if P:
            x = torch.cat([xp.expand(B, -1, -1), xs], 1)
        h = self.output_norm(x)
        return h if sel is None else h[sel]

    def logits(self, h):
        return h @ self.token_embd.weight.t()
