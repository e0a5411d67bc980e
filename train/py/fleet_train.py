# fleet's trainer arithmetic (package train): a Gemma 3 decoder in plain
# PyTorch, trained on token sequences fleet tokenized with llama.cpp.
#
# The Go side (train/) writes a work directory: config.json, train.seq and
# dev.seq (sequences of token ids with a target mask), and for LoRA or a
# warm start base.safetensors. This script trains, writes checkpoints
# (ckpt.pt, replaced atomically), reports progress as JSON lines on stdout
# and finally writes the best weights to out.safetensors (atomically).
# Tokenization and the GGUF file stay in Go.
#
# The forward pass, llama.cpp's gemma3 graph, is in fleet_model.py.
import json
import math
import os
import signal
import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F


def emit(event, **kw):
    kw["event"] = event
    sys.stdout.write(json.dumps(kw) + "\n")
    sys.stdout.flush()


def fail(code, msg):
    emit("error", code=code, message=msg)
    sys.exit(3)


# ---------------------------------------------------------------- data

def read_seqs(path):
    """train.seq / dev.seq: "FSEQ", u32 count, then per sequence u32 n,
    n little-endian i32 token ids and n u8 target flags (1: this token is a
    target, predicted from the tokens before it)."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"FSEQ":
        fail("data", "%s: not a fleet sequence file" % path)
    (count,) = struct.unpack_from("<I", data, 4)
    off = 8
    out = []
    for _ in range(count):
        (n,) = struct.unpack_from("<I", data, off)
        off += 4
        toks = np.frombuffer(data, dtype="<i4", count=n, offset=off).astype(np.int64)
        off += 4 * n
        mask = np.frombuffer(data, dtype=np.uint8, count=n, offset=off).astype(bool)
        off += n
        out.append((toks, mask))
    return out


def batches(seqs, order, batch_tokens):
    """Consecutive sequences of order, grouped while the padded batch stays
    within batch_tokens (a longer sequence is a batch of its own)."""
    cur, width = [], 0
    for i in order:
        n = len(seqs[i][0])
        w = max(width, n)
        if cur and w * (len(cur) + 1) > batch_tokens:
            yield cur
            cur, w = [], n
        cur.append(i)
        width = w
    if cur:
        yield cur


def epoch_batches(seqs, seed, batch_tokens):
    """One epoch's batches: a permutation drawn from seed, sorted by length
    within windows of 64 sequences so that a batch's rows are of similar
    lengths (little padding), and the batches themselves shuffled."""
    rs = np.random.RandomState(seed)
    order = rs.permutation(len(seqs))
    lens = [len(s[0]) for s in seqs]
    out = []
    for k in range(0, len(order), 64):
        win = sorted(order[k:k + 64], key=lambda i: (lens[i], i))
        out.extend(batches(seqs, win, batch_tokens))
    return [out[i] for i in rs.permutation(len(out))]


def collate(seqs, idx):
    """The batch's tokens and target flags, padded, and the length of the
    prefix its rows share before any target (computed once, fleet_model)."""
    width = max(len(seqs[i][0]) for i in idx)
    toks = torch.zeros((len(idx), width), dtype=torch.long)
    tgt = torch.zeros((len(idx), width), dtype=torch.bool)
    first = seqs[idx[0]][0]
    shared = len(first)
    for r, i in enumerate(idx):
        t, m = seqs[i]
        toks[r, : len(t)] = torch.from_numpy(t)
        tgt[r, : len(m)] = torch.from_numpy(m)
        n = min(shared, len(t))
        diff = np.flatnonzero(first[:n] != t[:n])
        shared = int(diff[0]) if len(diff) else n
        hits = np.flatnonzero(m)
        if len(hits):
            # position p predicts token p+1: keep every predicting position
            # out of the prefix
            shared = min(shared, int(hits[0]) - 1)
    return toks, tgt, max(shared, 0)


# ---------------------------------------------------------------- model

from fleet_model import Gemma3, LoRALinear  # noqa: E402  (fleet_model.py beside this file)


def gguf_names(model):
    """Parameter name -> GGUF tensor name."""
    out = {}
    for name, _ in model.named_parameters():
        n = name.replace("blocks.", "blk.")
        n = n.replace(".base.weight", ".weight")
        if n.endswith(".lora_a") or n.endswith(".lora_b"):
            # blk.0.attn_q.lora_a -> blk.0.attn_q.weight.lora_a
            stem, suf = n.rsplit(".", 1)
            n = stem + ".weight." + suf
        out[name] = n
    return out


# ---------------------------------------------------------------- safetensors

def write_safetensors(path, tensors, meta):
    header, off, blobs = {}, 0, []
    for name in sorted(tensors):
        a = tensors[name].detach().contiguous().float().numpy().astype("<f4")
        b = a.tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    header["__metadata__"] = {k: str(v) for k, v in meta.items()}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8 : 8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        a = np.frombuffer(data, dtype="<f4", count=(e - b) // 4, offset=8 + n + b)
        out[name] = torch.from_numpy(a.copy()).view(*info["shape"])
    return out


# ---------------------------------------------------------------- training

def save_atomic(obj, path):
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def lr_at(step, total, cfg):
    warm = cfg["warmup_steps"]
    if step < warm:
        return cfg["lr"] * (step + 1) / warm
    p = min(1.0, (step - warm) / max(1, total - warm))
    return cfg["min_lr"] + 0.5 * (cfg["lr"] - cfg["min_lr"]) * (1 + math.cos(math.pi * p))


def loss_of(model, toks, tgt, prefix=0):
    # The hidden state at t predicts the token at t+1: targets are the
    # flagged tokens from position 1 on.
    sel = tgt[:, 1:]
    logits = model.logits(model.hidden(toks[:, :-1], sel, prefix))
    y = toks[:, 1:][sel]
    return F.cross_entropy(logits, y, reduction="sum"), int(y.numel())


def evaluate(model, seqs, batch_tokens, accuracy=False):
    """Mean loss per target token (and the share of targets the argmax
    predicts, teacher-forced)."""
    if not seqs:
        return (None, None) if accuracy else None
    model.eval()
    tot, n, hit = 0.0, 0, 0
    with torch.no_grad():
        for idx in batches(seqs, range(len(seqs)), batch_tokens):
            toks, tgt, shared = collate(seqs, idx)
            sel = tgt[:, 1:]
            logits = model.logits(model.hidden(toks[:, :-1], sel, shared))
            y = toks[:, 1:][sel]
            tot += float(F.cross_entropy(logits, y, reduction="sum"))
            hit += int((logits.argmax(-1) == y).sum())
            n += int(y.numel())
    model.train()
    if accuracy:
        return tot / max(n, 1), hit / max(n, 1)
    return tot / max(n, 1)


def build(cfg, work):
    c = cfg["model"]
    torch.manual_seed(cfg["seed"])
    model = Gemma3(c)
    for name, p in model.named_parameters():
        if p.dim() == 2:
            torch.nn.init.normal_(p, std=cfg["init_std"])
    base = os.path.join(work, "base.safetensors")
    if os.path.exists(base):
        names = gguf_names(model)
        inv = {v: k for k, v in names.items()}
        sd = model.state_dict()
        for gname, t in read_safetensors(base).items():
            if gname not in inv:
                fail("base", "base tensor %s has no place in the model" % gname)
            key = inv[gname]
            if tuple(sd[key].shape) != tuple(t.shape):
                fail("base", "base tensor %s: shape %s, model wants %s" % (gname, tuple(t.shape), tuple(sd[key].shape)))
            sd[key].copy_(t)
    lora = cfg.get("lora")
    if lora:
        for p in model.parameters():
            p.requires_grad_(False)
        torch.manual_seed(cfg["seed"] + 1)
        for blk in model.blocks:
            for t in lora["targets"]:
                setattr(blk, t, LoRALinear(getattr(blk, t), lora["rank"], lora["alpha"]))
    return model


def main():
    work = sys.argv[1]
    with open(os.path.join(work, "config.json")) as f:
        cfg = json.load(f)
    torch.set_num_threads(cfg["threads"])
    torch.use_deterministic_algorithms(True)
    train = read_seqs(os.path.join(work, "train.seq"))
    dev = read_seqs(os.path.join(work, "dev.seq"))
    if not train:
        fail("data", "no training sequences")
    model = build(cfg, work)
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() == 2]
    rest = [p for p in params if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg["weight_decay"]},
                             {"params": rest, "weight_decay": 0.0}], lr=cfg["lr"], betas=(0.9, 0.98), eps=1e-8)
    bt = cfg["batch_tokens"]
    per_epoch = min(len(epoch_batches(train, cfg["seed"] * 1000003 + e, bt)) for e in range(cfg["epochs"]))
    total = per_epoch * cfg["epochs"]
    if cfg.get("max_steps"):
        total = min(total, cfg["max_steps"])
    ckpt = os.path.join(work, "ckpt.pt")
    best_path = os.path.join(work, "best.pt")
    st = {"step": 0, "best": None, "best_step": 0, "bad_evals": 0, "history": [], "tokens": 0, "stopped": ""}
    if os.path.exists(ckpt):
        saved = torch.load(ckpt)
        if saved["digest"] != cfg["digest"]:
            fail("resume", "checkpoint was made with other data or settings: run its command again to finish it, or -fresh to discard it")
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["opt"])
        st = saved["state"]
        emit("resumed", step=st["step"])
    emit("start", pid=os.getpid(), steps=total, steps_per_epoch=per_epoch, train=len(train), dev=len(dev),
         params=sum(p.numel() for p in model.parameters()), trainable=sum(p.numel() for p in params))

    stop = {"sig": False}

    def on_term(*_):
        stop["sig"] = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)

    def checkpoint():
        save_atomic({"digest": cfg["digest"], "model": model.state_dict(), "opt": opt.state_dict(), "state": st}, ckpt)

    if dev and st["step"] == 0 and not st["history"]:
        # the starting point (for LoRA: the base model itself)
        d0, a0 = evaluate(model, dev, bt, accuracy=True)
        st["history"].append([0, None, d0])
        st["initial_dev"], st["initial_acc"] = d0, a0
        emit("eval", step=0, dev_loss=d0, dev_accuracy=a0, best=None, best_step=0)
    t0, tok0 = time.time(), 0
    while st["step"] < total and not st["stopped"]:
        epoch, k = divmod(st["step"], per_epoch)
        bl = epoch_batches(train, cfg["seed"] * 1000003 + epoch, bt)
        idx = bl[k]
        for g in opt.param_groups:
            g["lr"] = lr_at(st["step"], total, cfg)
        toks, tgt, shared = collate(train, idx)
        lsum, n = loss_of(model, toks, tgt, shared)
        if n == 0:
            loss = None
        else:
            loss = lsum / n
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, cfg["clip"])
            opt.step()
        st["step"] += 1
        # tokens of the records (padding and the shared prefix's copies
        # included), so tokens/s says how fast the data goes through
        st["tokens"] += int(toks.numel())
        tok0 += int(toks.numel())
        lv = float(loss) if loss is not None else None
        st["history"].append([st["step"], lv, None])
        dt = time.time() - t0
        emit("step", step=st["step"], epoch=epoch + 1, loss=lv, tokens=st["tokens"], tok_s=tok0 / dt if dt > 0 else 0.0)
        last = st["step"] == total
        if cfg["eval_every"] and (st["step"] % cfg["eval_every"] == 0 or last) and dev:
            dl = evaluate(model, dev, bt)
            st["history"][-1][2] = dl
            improved = st["best"] is None or dl < st["best"] - cfg["min_delta"]
            if improved:
                st["best"], st["best_step"], st["bad_evals"] = dl, st["step"], 0
                save_atomic(model.state_dict(), best_path)
            else:
                st["bad_evals"] += 1
                if cfg["patience"] and st["bad_evals"] >= cfg["patience"]:
                    st["stopped"] = "early stop: dev loss did not improve for %d evaluations" % st["bad_evals"]
            emit("eval", step=st["step"], dev_loss=dl, best=st["best"], best_step=st["best_step"])
        if st["step"] % cfg["checkpoint_every"] == 0 or last or st["stopped"]:
            checkpoint()
            emit("checkpoint", step=st["step"])
        if stop["sig"]:
            checkpoint()
            emit("interrupted", step=st["step"])
            sys.exit(4)

    if dev and os.path.exists(best_path):
        model.load_state_dict(torch.load(best_path))
    names = gguf_names(model)
    if cfg.get("lora"):
        tensors = {names[n]: p for n, p in model.named_parameters() if "lora_" in n}
    else:
        tensors = {names[n]: p for n, p in model.named_parameters()}
    # the mean batch loss of the last steps (a full pass over the
    # training set would cost as much as an epoch's forward passes)
    recent = [h[1] for h in st["history"][-10:] if h[1] is not None]
    final_train = sum(recent) / len(recent) if recent else None
    _, dev_acc = evaluate(model, dev, bt, accuracy=True)
    write_safetensors(os.path.join(work, "out.safetensors"), tensors, {"step": st["step"]})
    emit("done", step=st["step"], best_step=st["best_step"], dev_loss=st["best"], train_loss=final_train,
         dev_accuracy=dev_acc, initial_dev_loss=st.get("initial_dev"), initial_dev_accuracy=st.get("initial_acc"), tok_s=tok0 / max(time.time() - t0, 1e-9),
         stopped=st["stopped"] or "completed %d steps" % st["step"], history=st["history"])


def logits_main(work, ids_path, out_path):
    """Logits of the trained model (out.safetensors) at every position of
    the token ids in ids_path (little-endian i32), as little-endian f32
    [positions, vocab]: the trainer's side of the logit-agreement check."""
    with open(os.path.join(work, "config.json")) as f:
        cfg = json.load(f)
    torch.set_num_threads(cfg["threads"])
    model = Gemma3(cfg["model"])
    names = gguf_names(model)
    inv = {v: k for k, v in names.items()}
    sd = model.state_dict()
    for gname, t in read_safetensors(os.path.join(work, "out.safetensors")).items():
        sd[inv[gname]].copy_(t)
    ids = np.fromfile(ids_path, dtype="<i4").astype(np.int64)
    with torch.no_grad():
        lg = model.logits(model.hidden(torch.from_numpy(ids)[None, :]))[0]
    lg.numpy().astype("<f4").tofile(out_path)


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "logits":
        logits_main(sys.argv[2], sys.argv[3], sys.argv[4])
        sys.exit(0)
    try:
        main()
    except MemoryError:
        fail("oom", "out of memory: lower -batch-tokens or the model size")
    except RuntimeError as e:
        if "alloc" in str(e).lower() or "memory" in str(e).lower():
            fail("oom", "out of memory: %s" % e)
        raise
