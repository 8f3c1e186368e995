#!/usr/bin/env python3
"""bench/peer/torch_peer.py — the PyTorch side of `make bench-peer` (optional: needs Debian's
python3-torch; never part of `make test`).

Reads build/bench/peer.json (written by bench/peer/engine.lua right before: each shape's model
config, batch, and the engine's tokens/s) and trains the same models in PyTorch eager mode on
random tokens with the same step as train.run: forward, cross entropy, backward, global-norm
clipping to 1, AdamW (betas 0.9/0.95, weight decay 0.1 on >= 2-D weights). Same threads
(torch.set_num_threads = the engine's). Prints engine / PyTorch tokens/s per shape.

GPT-2: learned positions, pre-LayerNorm blocks without biases, causal softmax attention, GELU
(tanh) MLP, final LayerNorm, tied lm head. LLaMA: RMSNorm, RoPE (rotate-half), SwiGLU, untied
head, no biases."""
import ctypes, json, math, os, statistics, sys, time

# The same OpenBLAS kernels as the engine: OpenBLAS picks its kernel set once, when it loads, and
# on a CPU model it does not know it falls back to old SSE3 ones (engine/blas.c), which the
# engine corrects for itself (OPENBLAS_CORETYPE) but PyTorch would not: measured on a 2-core
# Xeon that OpenBLAS took for a Prescott, PyTorch's organism step was 5x slower with those.
# So the kernel set the engine ran with (peer.json's blas_core) is set here before torch loads
# OpenBLAS; a user's own OPENBLAS_CORETYPE wins.
def _engine_blas_core(path):
    try:
        with open(path) as f:
            return json.load(f).get("blas_core")
    except (OSError, ValueError):
        return None


PEER_JSON = sys.argv[1] if len(sys.argv) > 1 else "build/bench/peer.json"
_core = _engine_blas_core(PEER_JSON)
if _core and "OPENBLAS_CORETYPE" not in os.environ:
    os.environ["OPENBLAS_CORETYPE"] = _core

import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class LayerNorm(nn.Module):
    """LayerNorm with a gain and no bias (the engine's GPT-2 with bias = false)"""
    def __init__(self, d, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return F.layer_norm(x, (x.shape[-1],), self.weight, None, self.eps)


def rope(x, base):
    # x (B, H, T, hd), rotate-half layout
    T, hd = x.shape[-2], x.shape[-1]
    inv = base ** (-torch.arange(0, hd, 2, dtype=torch.float32) / hd)
    ang = torch.arange(T, dtype=torch.float32)[:, None] * inv[None, :]
    cos, sin = ang.cos(), ang.sin()
    cos = torch.cat([cos, cos], -1)
    sin = torch.cat([sin, sin], -1)
    x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        d, self.h, f = c["d_model"], c["n_head"], c["d_ff"]
        self.llama = c["family"] == "llama"
        eps = c.get("norm_eps", 1e-5)
        Norm = (lambda: RMSNorm(d, eps)) if self.llama else (lambda: LayerNorm(d, eps))
        self.n1, self.n2 = Norm(), Norm()
        self.q, self.k, self.v, self.o = (nn.Linear(d, d, bias=False) for _ in range(4))
        if self.llama:
            self.w1, self.w3, self.w2 = nn.Linear(d, f, bias=False), nn.Linear(d, f, bias=False), nn.Linear(f, d, bias=False)
        else:
            self.fc, self.proj = nn.Linear(d, f, bias=False), nn.Linear(f, d, bias=False)
        self.base = c.get("rope_base", 10000)

    def forward(self, x):
        B, T, d = x.shape
        h = self.n1(x)
        q, k, v = (m(h).view(B, T, self.h, d // self.h).transpose(1, 2) for m in (self.q, self.k, self.v))
        if self.llama:
            q, k = rope(q, self.base), rope(k, self.base)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(d // self.h)
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
        a = s.masked_fill(mask, float("-inf")).softmax(-1) @ v
        x = x + self.o(a.transpose(1, 2).reshape(B, T, d))
        h = self.n2(x)
        if self.llama:
            return x + self.w2(F.silu(self.w1(h)) * self.w3(h))
        return x + self.proj(F.gelu(self.fc(h), approximate="tanh"))


class Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        d, V = c["d_model"], c["vocab_size"]
        self.llama = c["family"] == "llama"
        self.emb = nn.Embedding(V, d)
        if not self.llama:
            self.pos = nn.Embedding(c["block_size"], d)
        self.blocks = nn.ModuleList(Block(c) for _ in range(c["n_layer"]))
        self.nf = (RMSNorm if self.llama else LayerNorm)(d, c.get("norm_eps", 1e-5))
        self.head = nn.Linear(d, V, bias=False)
        if c.get("tie_embeddings"):
            self.head.weight = self.emb.weight

    def forward(self, ids, tg):
        x = self.emb(ids)
        if not self.llama:
            x = x + self.pos(torch.arange(ids.shape[1]))
        for b in self.blocks:
            x = b(x)
        logits = self.head(self.nf(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), tg.view(-1))


def bench(shape, threads):
    torch.manual_seed(1)
    c, B, T, steps = shape["cfg"], shape["B"], shape["T"], shape["steps"]
    m = Model(c)
    decay = [p for p in m.parameters() if p.dim() >= 2]
    no_decay = [p for p in m.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.95), eps=1e-8)
    V = c["vocab_size"]
    times = []
    for s in range(steps + 2):
        ids = torch.randint(0, V, (B, T))
        tg = torch.randint(0, V, (B, T))
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = m(ids, tg)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        dt = time.perf_counter() - t0
        if s >= 2:
            times.append(dt)
    dt = statistics.median(times)
    return B * T / dt, dt


def _openblas_core():
    """the kernel set of the OpenBLAS torch loaded (the same library: one soname per process)"""
    try:
        lib = ctypes.CDLL("libopenblas.so.0")
        lib.openblas_get_corename.restype = ctypes.c_char_p
        return lib.openblas_get_corename().decode()
    except (OSError, AttributeError):
        return "?"


def main():
    with open(PEER_JSON) as f:
        run = json.load(f)
    threads = int(run.get("threads") or os.cpu_count())
    torch.set_num_threads(threads)
    print(f"PyTorch {torch.__version__} eager, {threads} threads, OpenBLAS kernels {_openblas_core()} "
          f"(the engine's: {run.get('blas_core', '?')})")
    for sh in run["shapes"]:
        tok_s, dt = bench(sh, threads)
        line = (f"pytorch  {sh['name']:<16} B={sh['B']:<3} T={sh['T']:<5} {tok_s:9.0f} tok/s ({dt:.4f} s/step) | "
                f"engine {sh['engine_tok_s']:.0f} tok/s = {sh['engine_tok_s'] / tok_s:.2f}x PyTorch")
        share = sh.get("products_share") or 0
        if share > 0:
            # the engine's step with every op outside the products taking no time
            line += f" (products alone: {sh['engine_tok_s'] / share / tok_s:.2f}x)"
        print(line)


if __name__ == "__main__":
    main()
