#!/usr/bin/env python3
"""The DSpark draft step in plain PyTorch, the way a serving engine writes it: the speed peer
of sparkdraft's `propose` (contract.md sections 1 and 7; issue 24 point 5).

What it computes, on the checkpoint sparkdraft loads (config.json + safetensors, e.g. written
by `sparkdraft make-checkpoint`), with bf16 weights and torch.nn.functional ops:

  context   the target's hidden states of ctx tokens per request -> fc -> hidden_norm
            (-> each layer's input norm, `context_layer_norm`) -> K/V projection -> K-norm
            -> RoPE -> a contiguous KV cache [rows, kv_heads, ctx + N, head_dim] per layer.
            Stored once before timing, as `sparkdraft bench step` stores its context.
  the step  (timed; sparkdraft's `propose`):
            the query block (anchor, then N-1 mask tokens at positions ctx .. ctx+N-1)
            -> embedding -> L layers (QKV, QK-norm, RoPE, the block's K/V written into the
            cache, attention over [window lo, ctx + N) with F.scaled_dot_product_attention,
            o-norm and output gate, o_proj, residual boundaries with the pre-norm or sandwich
            norms and the plain bf16 or norm-preserving fp32 residual, SwiGLU MLP) -> final
            norm -> lm_head over the full vocabulary -> [rows, N, V] base logits
            -> the sequential Markov loop, the engine's way (vLLM's DSpark
            `_sample_sequential`): N steps of e = w1[prev] (embedding), bias = F.linear(e, w2)
            over the vocabulary, logits = base[:, j] + bias (bf16), the output-logit transform,
            the store into the draft-logits cache [rows, N, V] and Gumbel-max sampling with
            the contract's Philox keys (seed, position + 2^30, vocab id) in vLLM's per-block
            Triton kernel (`gumbel_sample`); on the CPU (and with --sampler torch) the same
            Philox in torch integer ops.

Three ways, each timed as the median of --repeats with cudaEvents and the L2 flushed (256 MB
written to a scratch buffer) before each:
  eager    the step called from Python (kernel launches included),
  graph    the eager step captured in one CUDA graph (torch.cuda.CUDAGraph), replayed,
  compile  torch.compile (Inductor, default mode) of the backbone + lm_head, the Markov loop as
           is, the whole step captured in one CUDA graph, replayed.
Before timing, each way's draft-logits cache and tokens are compared with the eager step's, and
the Triton sampler with the torch one (printed, and in the JSON under "checks").

The JSON is a list of records in the form of `sparkdraft bench step`'s (bench
"draft_step_peer", preset, rows, ctx, steps, vocab, markov_rank, gpu, bytes, bytes_parts,
copy_bandwidth_gbs, floor_us, ...) with eager_us, graph_us and compile_graph_us and their ratios
to the same floor (step_floor.cpp's bytes over the copy bandwidth measured in this run).

Run (the presets' checkpoints as `sparkdraft bench step` writes them, or --checkpoint DIR):
  build/sparkdraft make-checkpoint --preset qwen3-8b --out /tmp/sparkdraft-bench-qwen3-8b
  python3 bench/peer/peer_step.py --preset qwen3-8b --ctx 4096 --rows 1 8 32 \\
      --modes eager graph compile --json peer_qwen3-8b.json
On the CPU (tiny checkpoints, correctness only): --device cpu --modes eager.
"""

import argparse
import json
import math
import mmap
import os
import statistics
import struct
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import torch
import torch.nn.functional as F

try:  # the engine's sampling kernel; ships with CUDA builds of torch (Inductor needs it too)
    import triton
    import triton.language as tl
    from triton.language.extra import libdevice

    HAVE_TRITON = True
except ImportError:  # pragma: no cover - reported when --sampler triton is asked for
    HAVE_TRITON = False

BF16 = torch.bfloat16
DRAFT_NOISE_SALT = 1 << 30  # contract.md section 4: the draft's noise positions a + j + 2^30
U_MIN = 4.6566127342e-10  # 0x1.fffffep-32: the smallest uniform (u = 0 maps to it)
L2_FLUSH_BYTES = 256 << 20
PRESETS = ("qwen3-8b", "muse", "tiny")


class PeerError(RuntimeError):
    """A refused input or a failed check; main() prints it and exits 2."""


def progress(msg: str) -> None:
    print(f"[peer {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---------------------------------------------------------------------------------------------
# Config: our JSON form ("format": "sparkdraft") or the DeepSpec / HF Qwen3DSparkModel form, the
# two forms sparkdraft reads (src/io/config.cpp). What the peer cannot run is refused.


@dataclass
class Config:
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    markov_rank: int
    block_size: int
    target_hidden_size: int
    target_layer_ids: List[int]
    mask_token_id: int
    norm_gain: str = "weight"  # weight | one_plus_weight | none
    rms_norm_eps: float = 1e-6
    layer_style: str = "pre_norm"  # pre_norm | sandwich
    residual_kind: str = "plain"  # plain | norm_preserving
    stream_dtype: str = "bf16"  # bf16 | f32
    context_layer_norm: bool = False
    rope_style: str = "neox"  # neox | gptj
    rope_theta: float = 1e6
    qk_norm: bool = True
    v_norm: bool = False
    output_gate: bool = False
    o_norm: bool = False
    o_norm_weight: bool = True
    layer_attention: List[dict] = field(default_factory=list)  # [{"window", "causal"}] per layer
    logit_multiplier: Optional[float] = None
    logit_soft_cap: Optional[float] = None

    @property
    def taps_width(self) -> int:
        return len(self.target_layer_ids) * self.target_hidden_size

    def attention_of(self, layer: int) -> dict:
        if not self.layer_attention:
            return {"window": 0, "causal": False}
        return self.layer_attention[layer]


def _refuse_unsupported(j: dict, where: str) -> None:
    dv = j.get("draft_vocab_size")
    if dv is not None and dv != j["vocab_size"]:
        raise PeerError(f"{where}: a reduced draft vocabulary (draft_vocab_size {dv}) is not "
                        "supported by the peer (bench step's presets use the full vocabulary)")
    if j.get("enable_confidence_head"):
        raise PeerError(f"{where}: the confidence head is not supported by the peer")
    if not j.get("sample_from_anchor", True):
        raise PeerError(f"{where}: the fill-in layout (sample_from_anchor false) is not supported")


def parse_config(j: dict, where: str = "config.json") -> Config:
    _refuse_unsupported(j, where)
    if j.get("format") == "sparkdraft":
        names = [f for f in Config.__dataclass_fields__]
        missing = [n for n in names if n not in j]
        if missing:
            raise PeerError(f"{where}: missing fields {missing}")
        c = Config(**{n: j[n] for n in names})
    else:
        if "Qwen3DSparkModel" not in j.get("architectures", []):
            raise PeerError(f"{where}: neither sparkdraft's JSON form nor a Qwen3DSparkModel "
                            f"config (architectures {j.get('architectures')})")
        rope = j.get("rope_parameters") or {}
        if rope.get("rope_type", "default") != "default" or j.get("rope_scaling"):
            raise PeerError(f"{where}: RoPE scaling is not supported")
        theta = rope.get("rope_theta", j.get("rope_theta"))
        if theta is None:
            raise PeerError(f"{where}: missing rope_theta")
        heads = j["num_attention_heads"]
        layers = j["num_hidden_layers"]
        types = j.get("layer_types") or ["full_attention"] * layers
        causal = j.get("is_causal", (j.get("dflash_config") or {}).get("causal"))
        la = []
        for t in types:
            sliding = t == "sliding_attention"
            la.append({"window": j["sliding_window"] if sliding else 0,
                       "causal": sliding if causal is None else bool(causal)})
        c = Config(
            hidden_size=j["hidden_size"], num_layers=layers, num_heads=heads,
            num_kv_heads=j.get("num_key_value_heads", heads),
            head_dim=j.get("head_dim", j["hidden_size"] // heads),
            intermediate_size=j["intermediate_size"], vocab_size=j["vocab_size"],
            markov_rank=j["markov_rank"], block_size=j["block_size"],
            target_hidden_size=j.get("target_hidden_size", j["hidden_size"]),
            target_layer_ids=list(j["target_layer_ids"]), mask_token_id=j["mask_token_id"],
            rms_norm_eps=j.get("rms_norm_eps", 1e-6), rope_theta=float(theta),
            rope_style="neox" if j.get("is_neox_style", True) else "gptj", layer_attention=la)
    if c.markov_rank <= 0:
        raise PeerError(f"{where}: markov_rank {c.markov_rank}: the peer needs a Markov head")
    if c.num_heads % c.num_kv_heads:
        raise PeerError(f"{where}: num_heads {c.num_heads} is no multiple of num_kv_heads")
    return c


# ---------------------------------------------------------------------------------------------
# Weights: every *.safetensors file of the directory (sparkdraft's names, an optional "model."
# prefix dropped), read through mmap without extra packages.

_ST_DTYPES = {"BF16": torch.bfloat16, "F32": torch.float32, "F16": torch.float16,
              "I64": torch.int64, "I32": torch.int32}


def load_tensors(ckpt_dir: str, device: str) -> Dict[str, torch.Tensor]:
    files = sorted(f for f in os.listdir(ckpt_dir) if f.endswith(".safetensors"))
    if not files:
        raise PeerError(f"no .safetensors file in {ckpt_dir}")
    out: Dict[str, torch.Tensor] = {}
    for name in files:
        path = os.path.join(ckpt_dir, name)
        with open(path, "rb") as f:
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)  # private: never written
        (hlen,) = struct.unpack("<Q", mm[:8])
        header = json.loads(mm[8:8 + hlen])
        base = 8 + hlen
        for key, info in header.items():
            if key == "__metadata__":
                continue
            if info["dtype"] not in _ST_DTYPES:
                raise PeerError(f"{path}: tensor {key} has dtype {info['dtype']}")
            begin, end = info["data_offsets"]
            raw = torch.frombuffer(mm, dtype=torch.uint8, count=end - begin, offset=base + begin)
            t = raw.view(_ST_DTYPES[info["dtype"]]).reshape(info["shape"])
            out[key[6:] if key.startswith("model.") else key] = t.to(device, copy=True)
        del mm  # the tensors above are copies
    return out


# ---------------------------------------------------------------------------------------------
# Element ops (fp32 inside, one bf16 rounding at the output, as contract.md section 3 places it).


def rms_norm(x: torch.Tensor, weight: Optional[torch.Tensor], gain: str, eps: float):
    """RMSNorm over the last dim of bf16 or fp32 x; gain weight (x*r*w), one_plus_weight
    (x*r*(1+w)) or none; bf16 out."""
    xf = x.float()
    y = xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps)
    if gain == "weight":
        y = y * weight.float()
    elif gain == "one_plus_weight":
        y = y * (1.0 + weight.float())
    return y.to(BF16)


def rope_table(cfg: Config, positions: int, device) -> torch.Tensor:
    """[positions, head_dim] fp32: cos in the first half, sin in the second (computed in double,
    contract.md section 3)."""
    d = cfg.head_dim
    i = torch.arange(d // 2, dtype=torch.float64)
    inv = (1.0 / torch.pow(torch.tensor(cfg.rope_theta, dtype=torch.float64), 2 * i / d))
    inv = inv.float().double()
    ang = torch.arange(positions, dtype=torch.float64)[:, None] * inv[None]
    return torch.cat([torch.cos(ang).float(), torch.sin(ang).float()], 1).to(device)


def apply_rope(x: torch.Tensor, cs: torch.Tensor, style: str) -> torch.Tensor:
    """x [T, heads, hd] bf16, cs [T, hd] fp32 (cos | sin) -> bf16; NeoX pairs (i, i + hd/2),
    GPT-J pairs (2i, 2i + 1)."""
    h = x.shape[-1] // 2
    c, s = cs[:, None, :h], cs[:, None, h:]
    xf = x.float()
    if style == "neox":
        x1, x2 = xf[..., :h], xf[..., h:]
        return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], -1).to(BF16)
    x1, x2 = xf[..., 0::2], xf[..., 1::2]
    return torch.stack([x1 * c - x2 * s, x2 * c + x1 * s], -1).flatten(-2).to(BF16)


# ---------------------------------------------------------------------------------------------
# Sampling: Philox4x32-10 (contract.md section 4; Triton's tl.randint) and Gumbel-max.

_M0, _M1, _K0, _K1, _MASK = 0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85, 0xFFFFFFFF


def _mulhilo(a: torch.Tensor, m: int):
    """(hi, lo) 32-bit halves of a * m for int64 a in [0, 2^32) and a 32-bit constant m, in
    int64 arithmetic without overflow."""
    p_lo = (a & 0xFFFF) * m
    p_hi = (a >> 16) * m
    return (p_hi + (p_lo >> 16)) >> 16, (p_lo + ((p_hi & 0xFFFF) << 16)) & _MASK


def philox_randint(seed: torch.Tensor, offset: torch.Tensor) -> torch.Tensor:
    """randint(seed, off) of contract.md section 4 for int64 tensors (broadcast), int64 result
    in [0, 2^32)."""
    k0, k1 = seed & _MASK, (seed >> 32) & _MASK
    c0, c1 = offset & _MASK, (offset >> 32) & _MASK
    c2 = c3 = torch.zeros_like(c0)
    k0, k1, c0, c1 = torch.broadcast_tensors(k0, k1, c0, c1)
    for _ in range(10):
        hi_a, lo_a = _mulhilo(c0, _M0)
        hi_b, lo_b = _mulhilo(c2, _M1)
        c0, c1, c2, c3 = hi_b ^ c1 ^ k0, lo_b, hi_a ^ c3 ^ k1, lo_a
        k0, k1 = (k0 + _K0) & _MASK, (k1 + _K1) & _MASK
    return c0


def philox_uniform(gs: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """u = philox_uniform(gs, v) (Triton's tl.rand with the engine's clamp), fp32."""
    x = philox_randint(gs, ids)
    x = torch.where(x >= 1 << 31, x - (1 << 32), x)  # as int32
    x = torch.where(x < 0, -x - 1, x)
    return torch.clamp_min(x.float() * U_MIN, U_MIN)


def gumbel_sample_torch(logits, cache, temperature, seed, position):
    """Stores logits [R, V] bf16 in cache [R, V] (before temperature), returns the Gumbel-max
    tokens [R] int64: z = l / T + g with g = -log(-log1p(-u)) keyed by (seed, position, id);
    argmax at T = 0."""
    cache.copy_(logits)
    R, V = logits.shape
    gs = philox_randint(seed, position)
    ids = torch.arange(V, device=logits.device, dtype=torch.int64)
    u = philox_uniform(gs[:, None], ids[None, :])
    g = -torch.log(-torch.log1p(-u))
    lf = logits.float()
    t = temperature[:, None]
    z = torch.where(t > 0, lf / torch.where(t > 0, t, 1.0) + g, lf)
    return z.argmax(-1)


if HAVE_TRITON:

    @triton.jit
    def _gumbel_block_kernel(logits_ptr, logits_stride, cache_ptr, cache_stride, temp_ptr,
                             seed_ptr, pos_ptr, max_ptr, idx_ptr, V, num_blocks,
                             BLOCK: tl.constexpr):
        # vLLM's gumbel_sample (gen-2, is_drafting): per 1024-wide vocabulary block the cache
        # store before temperature, l / T, the Philox noise, the block max and its index.
        row = tl.program_id(0)
        blk = tl.program_id(1)
        offs = blk * BLOCK + tl.arange(0, BLOCK)
        mask = offs < V
        lg = tl.load(logits_ptr + row * logits_stride + offs, mask=mask, other=float("-inf"))
        tl.store(cache_ptr + row * cache_stride + offs, lg, mask=mask)
        lf = lg.to(tl.float32)
        t = tl.load(temp_ptr + row)
        if t != 0.0:
            gs = tl.randint(tl.load(seed_ptr + row), tl.load(pos_ptr + row))
            u = tl.maximum(tl.rand(gs, offs), 4.6566127342e-10)  # U_MIN
            g = -tl.log(-libdevice.log1p(-u))
            lf = tl.where(mask, lf / t + g, float("-inf"))
        m, i = tl.max(lf, axis=0, return_indices=True)
        tl.store(max_ptr + row * num_blocks + blk, m)
        tl.store(idx_ptr + row * num_blocks + blk, blk * BLOCK + i)


def gumbel_sample_triton(logits, cache, temperature, seed, position, block: int = 1024):
    R, V = logits.shape
    nb = triton.cdiv(V, block)
    maxes = torch.empty((R, nb), dtype=torch.float32, device=logits.device)
    idx = torch.empty((R, nb), dtype=torch.int64, device=logits.device)
    _gumbel_block_kernel[(R, nb)](logits, logits.stride(0), cache, cache.stride(0), temperature,
                                  seed, position, maxes, idx, V, nb, BLOCK=block)
    return idx.gather(1, maxes.argmax(1, keepdim=True)).squeeze(1)


SAMPLERS = {"torch": gumbel_sample_torch, "triton": gumbel_sample_triton}


# ---------------------------------------------------------------------------------------------
# The draft.


class PeerDraft:
    """The draft's weights, packed as an engine packs them (QKV, gate_up and the stacked context
    K/V as single matrices), and a contiguous KV cache per layer."""

    def __init__(self, cfg: Config, t: Dict[str, torch.Tensor], device: str):
        self.cfg, self.device = cfg, device
        c = cfg

        def take(name):
            if name not in t:
                raise PeerError(f"the checkpoint has no tensor {name}")
            return t.pop(name)

        norms = c.norm_gain != "none"
        opt = lambda name: take(name) if norms else None  # noqa: E731
        self.embed = take("embed_tokens.weight")
        self.fc = take("fc.weight")
        self.hidden_norm = opt("hidden_norm.weight")
        self.layers = []
        for i in range(c.num_layers):
            p = f"layers.{i}."
            a = p + "self_attn."
            lw = {"input_norm": opt(p + "input_layernorm.weight")}
            q, k, v = take(a + "q_proj.weight"), take(a + "k_proj.weight"), take(a + "v_proj.weight")
            g = [take(a + "g_proj.weight")] if c.output_gate else []
            lw["qkv"] = torch.cat([q] + g + [k, v], 0)  # columns q | g | k | v
            lw["kv"] = torch.cat([k, v], 0)
            del q, k, v, g
            lw["o_proj"] = take(a + "o_proj.weight")
            lw["q_norm"] = opt(a + "q_norm.weight") if c.qk_norm else None
            lw["k_norm"] = opt(a + "k_norm.weight") if c.qk_norm else None
            lw["o_norm"] = opt(a + "o_norm.weight") if c.o_norm and c.o_norm_weight else None
            lw["post_attn_norm"] = opt(p + "post_attention_layernorm.weight")
            if c.layer_style == "sandwich":
                lw["pre_ffn_norm"] = opt(p + "pre_feedforward_layernorm.weight")
                lw["post_ffn_norm"] = opt(p + "post_feedforward_layernorm.weight")
            lw["gate_up"] = torch.cat([take(p + "mlp.gate_proj.weight"),
                                       take(p + "mlp.up_proj.weight")], 0)
            lw["down"] = take(p + "mlp.down_proj.weight")
            if c.residual_kind == "norm_preserving":
                for b in ("attn", "mlp"):
                    lw[b + "_alpha"] = take(f"{p}{b}_residual.alpha").float()
                    lw[b + "_beta"] = take(f"{p}{b}_residual.beta").float()
            self.layers.append(lw)
        # The context's stacked K/V GEMM (vLLM's _fused_kv_weight) where no per-layer norm
        # intervenes; per layer otherwise.
        self.context_kv = None
        if not c.context_layer_norm:
            self.context_kv = torch.cat([lw.pop("kv") for lw in self.layers], 0)
        self.final_norm = opt("norm.weight")
        self.lm_head = take("lm_head.weight")
        self.w1 = take("markov_head.markov_w1.weight")
        self.w2 = take("markov_head.markov_w2.weight")
        if t:
            raise PeerError(f"tensors the peer does not use: {sorted(t)[:8]}")
        # The output-logit transform's constants, fp32 values (contract.md section 3).
        f32 = lambda v: float(torch.tensor(v, dtype=torch.float32))  # noqa: E731
        self.multiplier = None if c.logit_multiplier is None else f32(c.logit_multiplier)
        self.cap = None if c.logit_soft_cap is None else f32(c.logit_soft_cap)
        self.inv_cap = None if self.cap is None else float(
            torch.tensor(1.0, dtype=torch.float32) / torch.tensor(self.cap, dtype=torch.float32))
        self.q = c.num_heads * c.head_dim
        self.kv = c.num_kv_heads * c.head_dim
        self.rows = self.ctx = 0

    # ---- the KV cache and the context chain (not timed) ----

    def allocate(self, rows: int, ctx: int) -> None:
        """A KV cache for `rows` requests of ctx context positions and the query block."""
        c = self.cfg
        self.rows, self.ctx = rows, ctx
        self.k_cache = self.v_cache = None
        shape = (rows, c.num_kv_heads, ctx + c.block_size, c.head_dim)
        self.k_cache = [torch.zeros(shape, dtype=BF16, device=self.device)
                        for _ in range(c.num_layers)]
        self.v_cache = [torch.zeros(shape, dtype=BF16, device=self.device)
                        for _ in range(c.num_layers)]
        self.rope = rope_table(c, ctx + c.block_size, self.device)
        self.block_rope = self.rope[ctx:ctx + c.block_size].repeat(rows, 1)  # [rows * N, hd]
        # Each layer's span of the block's queries, [lo, ctx + N), and its mask (None: all).
        N, G = c.block_size, c.num_heads // c.num_kv_heads
        self.spans = []
        for layer in range(c.num_layers):
            a = c.attention_of(layer)
            lo = max(0, ctx - a["window"] + 1) if a["window"] > 0 else 0
            pos = torch.arange(lo, ctx + N)
            qpos = torch.arange(ctx, ctx + N)[:, None]
            ok = torch.ones(N, len(pos), dtype=torch.bool)
            if a["window"] > 0:
                ok &= pos[None] >= qpos - a["window"] + 1
            if a["causal"]:
                ok &= pos[None] <= qpos
            mask = None if bool(ok.all()) else ok.repeat(G, 1).to(self.device)  # [G * N, span]
            self.spans.append((lo, mask))

    def store_context(self, row: int, hidden: torch.Tensor, start: int = 0) -> None:
        """The context chain of one request: hidden [T, taps * H_t] bf16 at positions start ..
        start + T - 1 into the KV cache."""
        c = self.cfg
        T, L, kvh, hd = hidden.shape[0], c.num_layers, c.num_kv_heads, c.head_dim
        if start + T > self.ctx:
            raise PeerError(f"context positions up to {start + T} exceed ctx {self.ctx}")
        cs = self.rope[start:start + T]
        h = F.linear(hidden, self.fc)
        normed = rms_norm(h, self.hidden_norm, c.norm_gain, c.rms_norm_eps)
        if self.context_kv is not None:
            kv_all = F.linear(normed, self.context_kv).view(T, L, 2, kvh, hd)
        for layer in range(L):
            lw = self.layers[layer]
            if self.context_kv is not None:
                k, v = kv_all[:, layer, 0], kv_all[:, layer, 1]
            else:
                x = rms_norm(normed, lw["input_norm"], c.norm_gain, c.rms_norm_eps)
                kv = F.linear(x, lw["kv"]).view(T, 2, kvh, hd)
                k, v = kv[:, 0], kv[:, 1]
            if c.qk_norm:
                k = rms_norm(k, lw["k_norm"], c.norm_gain, c.rms_norm_eps)
            if c.v_norm:
                v = rms_norm(v, None, "none", c.rms_norm_eps)
            k = apply_rope(k, cs, c.rope_style)
            self.k_cache[layer][row, :, start:start + T] = k.transpose(0, 1)
            self.v_cache[layer][row, :, start:start + T] = v.transpose(0, 1)

    # ---- the step: backbone + lm_head (what mode "compile" compiles) ----

    def _boundary(self, branch, residual, sandwich, post_w, alpha, beta, pre_w):
        """Residual boundary: post-norm (sandwich), s' = s + b (bf16) or alpha*s + beta*b (fp32),
        the next input = pre_norm(bf16(s'))."""
        c = self.cfg
        b = rms_norm(branch, post_w, c.norm_gain, c.rms_norm_eps) if sandwich else branch
        if alpha is not None:
            s = alpha * residual.float() + beta * b.float()
        else:
            s = residual.float() + b.float()
        sb = s.to(BF16)
        nxt = rms_norm(sb, pre_w, c.norm_gain, c.rms_norm_eps)
        return (s if c.stream_dtype == "f32" else sb), nxt

    def attention(self, q, layer: int) -> torch.Tensor:
        """q [R*N, heads, hd] -> [R*N, heads*hd]. The query heads sharing a KV head are folded
        into the query length (one SDPA head per KV head: any SDPA backend, no K/V copies)."""
        c = self.cfg
        R, N, kvh, hd = self.rows, c.block_size, c.num_kv_heads, c.head_dim
        G = c.num_heads // kvh
        qf = q.view(R, N, kvh, G, hd).permute(0, 2, 3, 1, 4).reshape(R, kvh, G * N, hd)
        lo, mask = self.spans[layer]
        end = self.ctx + N
        k = self.k_cache[layer][:, :, lo:end]
        v = self.v_cache[layer][:, :, lo:end]
        o = F.scaled_dot_product_attention(qf, k, v, attn_mask=mask, scale=1.0 / math.sqrt(hd))
        return o.view(R, kvh, G, N, hd).permute(0, 3, 1, 2, 4).reshape(R * N, c.num_heads * hd)

    def base_logits(self, anchors: torch.Tensor) -> torch.Tensor:
        """The query block of anchors [R] through the backbone and lm_head: [R, N, V] bf16. Writes
        the block's K/V at positions ctx .. ctx+N-1."""
        c = self.cfg
        R, N, H, hd, eps, gain = self.rows, c.block_size, c.hidden_size, c.head_dim, \
            c.rms_norm_eps, c.norm_gain
        T, ctx, q, kv = R * N, self.ctx, self.q, self.kv
        ids = torch.cat([anchors[:, None], torch.full_like(anchors[:, None], c.mask_token_id)
                         .expand(R, N - 1)], 1).reshape(T)
        x = F.embedding(ids, self.embed)
        residual = x.float() if c.stream_dtype == "f32" else x
        h = rms_norm(x, self.layers[0]["input_norm"], gain, eps)
        sandwich = c.layer_style == "sandwich"
        for layer, lw in enumerate(self.layers):
            qkv = F.linear(h, lw["qkv"])
            qh = qkv[:, :q].view(T, c.num_heads, hd)
            kb = q + (q if c.output_gate else 0)
            kh = qkv[:, kb:kb + kv].view(T, c.num_kv_heads, hd)
            vh = qkv[:, kb + kv:kb + 2 * kv].view(T, c.num_kv_heads, hd)
            if c.qk_norm:
                qh = rms_norm(qh, lw["q_norm"], gain, eps)
                kh = rms_norm(kh, lw["k_norm"], gain, eps)
            if c.v_norm:
                vh = rms_norm(vh, None, "none", eps)
            qh = apply_rope(qh, self.block_rope, c.rope_style)
            kh = apply_rope(kh, self.block_rope, c.rope_style)
            self.k_cache[layer][:, :, ctx:ctx + N] = kh.view(R, N, -1, hd).transpose(1, 2)
            self.v_cache[layer][:, :, ctx:ctx + N] = vh.view(R, N, -1, hd).transpose(1, 2)
            o = self.attention(qh, layer)
            if c.o_norm:
                o = rms_norm(o.view(T, c.num_heads, hd), lw["o_norm"],
                             gain if c.o_norm_weight else "none", eps).view(T, q)
            if c.output_gate:
                o = (o.float() * torch.sigmoid(qkv[:, q:2 * q].float())).to(BF16)
            branch = F.linear(o, lw["o_proj"])
            residual, h = self._boundary(
                branch, residual, sandwich, lw["post_attn_norm"],
                lw.get("attn_alpha"), lw.get("attn_beta"),
                lw["pre_ffn_norm"] if sandwich else lw["post_attn_norm"])
            gu = F.linear(h, lw["gate_up"])
            act = (F.silu(gu[:, :c.intermediate_size].float())
                   * gu[:, c.intermediate_size:].float()).to(BF16)
            branch = F.linear(act, lw["down"])
            nxt = self.layers[layer + 1]["input_norm"] if layer + 1 < c.num_layers \
                else self.final_norm
            residual, h = self._boundary(
                branch, residual, sandwich, lw.get("post_ffn_norm"),
                lw.get("mlp_alpha"), lw.get("mlp_beta"), nxt)
        return F.linear(h, self.lm_head).view(R, N, c.vocab_size)

    # ---- the step: the Markov loop (the engine's eager loop, never compiled) ----

    def step_logits(self, base_j: torch.Tensor, prev: torch.Tensor) -> torch.Tensor:
        """One Markov step's logits [R, V] bf16: base + w2 @ w1[prev], then the transform."""
        e = F.embedding(prev, self.w1)  # [R, r]
        s = base_j + F.linear(e, self.w2)  # bf16 add: fp32, one rounding
        if self.multiplier is not None or self.cap is not None:
            t = s.float()
            if self.multiplier is not None:
                t = t * self.multiplier
            if self.cap is not None:
                t = torch.tanh(t * self.inv_cap) * self.cap
            s = t.to(BF16)
        return s

    def markov_loop(self, base, anchors, anchor_positions, seeds, temperatures, tokens_out,
                    cache_out, sampler: str) -> None:
        """N sequential steps; writes tokens_out [R, N] and cache_out [R, N, V]."""
        sample = SAMPLERS[sampler]
        prev = anchors
        for j in range(self.cfg.block_size):
            logits = self.step_logits(base[:, j], prev)
            pos = anchor_positions + (j + DRAFT_NOISE_SALT)
            tok = sample(logits, cache_out[:, j], temperatures, seeds, pos)
            tokens_out[:, j].copy_(tok)
            prev = tok


# ---------------------------------------------------------------------------------------------
# The benchmark.


def step_floor_bytes(c: Config, rows: int, ctx: int) -> Dict[str, float]:
    """bench/step/step_floor.cpp at TP 1: the bytes the step must move at least."""
    H, L, hd, I, V, N, R = c.hidden_size, c.num_layers, c.head_dim, c.intermediate_size, \
        c.vocab_size, c.block_size, rows
    q, kv = c.num_heads * hd, c.num_kv_heads * hd
    gains = c.norm_gain != "none"
    layer = 2.0 * ((q + 2 * kv + (q if c.output_gate else 0)) * H + H * q + 2 * I * H + H * I)
    if gains:
        norms = 2 * H + (2 * H if c.layer_style == "sandwich" else 0)
        norms += 2 * hd if c.qk_norm else 0
        norms += hd if c.o_norm and c.o_norm_weight else 0
        layer += 2.0 * norms
    if c.residual_kind == "norm_preserving":
        layer += 4.0 * 4 * H
    positions = 0.0
    for i in range(L):
        a = c.attention_of(i)
        lo = max(0.0, ctx - a["window"] + 1.0) if a["window"] > 0 else 0.0
        positions += ctx + N - lo
    return {
        "layer_weights": L * layer + (2.0 * H if gains else 0),
        "lm_head": 2.0 * V * H,
        "kv_cache": 2.0 * R * positions * c.num_kv_heads * 2 * hd,
        "markov_w2": 2.0 * V * c.markov_rank * N,
        "base_logits": 2 * 2.0 * R * N * V,
        "draft_logits": 2.0 * R * N * V,
    }


class Timer:
    """Median over repeats of one call between two cudaEvents, the L2 flushed (256 MB written)
    before each; on the CPU the host time of the call."""

    def __init__(self, device: str):
        self.cuda = device.startswith("cuda")
        self.flush = (torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.float32, device=device)
                      if self.cuda else None)

    def median_us(self, fn, warmup: int, repeats: int) -> float:
        for _ in range(warmup):
            fn()
        times = []
        for _ in range(repeats):
            if self.cuda:
                self.flush.zero_()
                a = torch.cuda.Event(enable_timing=True)
                b = torch.cuda.Event(enable_timing=True)
                a.record()
                fn()
                b.record()
                b.synchronize()
                times.append(a.elapsed_time(b) * 1e3)
            else:
                t0 = time.perf_counter()
                fn()
                times.append((time.perf_counter() - t0) * 1e6)
        return statistics.median(times)


def copy_bandwidth_gbs(device: str) -> float:
    """harness.cpp's copy_bandwidth_gbs: a 512 MB device-to-device copy, 2 x bytes over the
    median time of 10 (after 2 warm-up copies)."""
    n = 512 << 20
    a = torch.zeros(n, dtype=torch.uint8, device=device)
    b = torch.empty_like(a)
    times = []
    for i in range(12):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        b.copy_(a)
        e1.record()
        e1.synchronize()
        if i >= 2:
            times.append(e0.elapsed_time(e1) * 1e-3)
    return 2.0 * n / statistics.median(times) / 1e9


class StepBuffers:
    """The step's static inputs and outputs (bench step's: anchors seeded in [0, V), positions
    ctx, seeds seed % 2^40 * 7919 + r, temperature 1, cache slot r for row r)."""

    def __init__(self, peer: PeerDraft, seed: int, gen: torch.Generator, temperature: float):
        c, R, dev = peer.cfg, peer.rows, peer.device
        self.anchors = torch.randint(0, c.vocab_size, (R,), generator=gen, device=dev)
        self.positions = torch.full((R,), peer.ctx, dtype=torch.int64, device=dev)
        self.seeds = (torch.arange(R, dtype=torch.int64) + (seed % (1 << 40)) * 7919).to(dev)
        self.temperatures = torch.full((R,), temperature, dtype=torch.float32, device=dev)
        self.tokens = torch.zeros((R, c.block_size), dtype=torch.int64, device=dev)
        self.cache = torch.zeros((R, c.block_size, c.vocab_size), dtype=BF16, device=dev)

    def snapshot(self):
        return self.tokens.clone(), self.cache.clone()


def compare(name: str, found, expected, steps: int) -> dict:
    """Tokens and cache of `found` against `expected`: the token agreement, and the largest
    cache difference over the steps whose predecessors agree (a differing token changes the
    next step's Markov bias), relative to the largest |expected|."""
    tf, cf = found
    te, ce = expected
    R = te.shape[0]
    same = (tf == te)
    worst = 0.0
    for r in range(R):
        mism = (~same[r]).nonzero()
        last = int(mism[0]) if len(mism) else steps - 1  # rows up to the first difference
        d = (cf[r, :last + 1].float() - ce[r, :last + 1].float()).abs().max().item()
        worst = max(worst, d)
    scale = ce.float().abs().max().item()
    res = {"tokens_equal": int(same.sum()), "tokens": int(same.numel()),
           "cache_max_abs_diff": worst, "cache_max_abs": scale,
           "cache_bit_equal": bool(torch.equal(cf.view(torch.int16), ce.view(torch.int16)))}
    progress(f"  check {name}: tokens {res['tokens_equal']}/{res['tokens']} equal, cache max "
             f"|diff| {worst:.4g} (max |logit| {scale:.4g}, bit-equal {res['cache_bit_equal']})")
    if not math.isfinite(worst) or worst > 0.05 * max(scale, 1.0):
        raise PeerError(f"{name}: the draft-logits cache differs from the eager step's by "
                        f"{worst:.4g} (max |logit| {scale:.4g}): not the same computation")
    return res


def run_rows(peer: PeerDraft, args, rows: int, timer: Timer, floor: dict, bw: float) -> dict:
    c, dev = peer.cfg, args.device
    cuda = dev.startswith("cuda")
    progress(f"rows {rows}: KV cache for ctx {args.ctx}, storing the context "
             f"({rows} x {args.ctx} hidden states of width {c.taps_width})")
    peer.allocate(rows, args.ctx)
    gen = torch.Generator(device=dev).manual_seed(args.seed)
    chunk = 1024
    for r in range(rows):
        for s in range(0, args.ctx, chunk):
            n = min(chunk, args.ctx - s)
            hidden = (torch.rand((n, c.taps_width), generator=gen, device=dev) * 4 - 2).to(BF16)
            peer.store_context(r, hidden, s)
    buf = StepBuffers(peer, args.seed, gen, args.temperature)
    sampler = args.sampler

    def eager_step(base_fn=peer.base_logits):
        base = base_fn(buf.anchors)
        peer.markov_loop(base, buf.anchors, buf.positions, buf.seeds, buf.temperatures,
                         buf.tokens, buf.cache, sampler)

    rec = {"rows": rows, "checks": {}}
    progress(f"rows {rows}: eager step (warm-up and reference)")
    eager_step()
    eager_step()
    if cuda:
        torch.cuda.synchronize()
    ref = buf.snapshot()
    if sampler == "triton":  # the engine's kernel against the torch Philox, same base logits
        base = peer.base_logits(buf.anchors)
        tok = torch.zeros_like(buf.tokens)
        cache = torch.zeros_like(buf.cache)
        peer.markov_loop(base, buf.anchors, buf.positions, buf.seeds, buf.temperatures, tok,
                         cache, "torch")
        rec["checks"]["triton_vs_torch_sampler"] = compare("triton sampler vs torch sampler",
                                                           ref, (tok, cache), c.block_size)
        if rec["checks"]["triton_vs_torch_sampler"]["tokens_equal"] < 0.99 * tok.numel():
            raise PeerError("the Triton sampler's tokens differ from the torch Philox sampler's "
                            "in more than 1% of the draws")
        del base, tok, cache

    graphs = []

    def capture(step):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                step()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            step()
        graphs.append(g)
        return g

    if "eager" in args.modes:
        progress(f"rows {rows}: timing eager ({args.repeats} repeats)")
        rec["eager_us"] = timer.median_us(eager_step, args.warmup, args.repeats)
    if "graph" in args.modes:
        progress(f"rows {rows}: capturing the eager step in a CUDA graph")
        g = capture(eager_step)
        buf.tokens.zero_()
        buf.cache.zero_()
        g.replay()
        torch.cuda.synchronize()
        rec["checks"]["graph_vs_eager"] = compare("graph vs eager", buf.snapshot(), ref,
                                                  c.block_size)
        progress(f"rows {rows}: timing graph replays ({args.repeats} repeats)")
        rec["graph_us"] = timer.median_us(g.replay, args.warmup, args.repeats)
    if "compile" in args.modes:
        progress(f"rows {rows}: torch.compile of backbone + lm_head (Inductor, default mode; "
                 "minutes)")
        t0 = time.perf_counter()
        compiled = torch.compile(peer.base_logits, dynamic=False)
        compiled(buf.anchors)
        torch.cuda.synchronize()
        rec["compile_s"] = time.perf_counter() - t0
        progress(f"rows {rows}: compiled in {rec['compile_s']:.0f} s; capturing the step")
        g = capture(lambda: eager_step(compiled))
        buf.tokens.zero_()
        buf.cache.zero_()
        g.replay()
        torch.cuda.synchronize()
        rec["checks"]["compile_graph_vs_eager"] = compare("compile+graph vs eager",
                                                          buf.snapshot(), ref, c.block_size)
        progress(f"rows {rows}: timing compile+graph replays ({args.repeats} repeats)")
        rec["compile_graph_us"] = timer.median_us(g.replay, args.warmup, args.repeats)
    del graphs
    peer.k_cache = peer.v_cache = None
    if cuda:
        torch.cuda.empty_cache()
    if floor is not None:
        for m in ("eager", "graph", "compile_graph"):
            if m + "_us" in rec:
                rec[m + "_ratio"] = rec[m + "_us"] / floor["floor_us"]
    return rec


def parse_args(argv=None):
    doc = __doc__.split("\n\n")
    ap = argparse.ArgumentParser(description=doc[0],
                                 epilog="\n\n".join(doc[1:]),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", choices=PRESETS, default="qwen3-8b",
                    help="checkpoint <preset-dir>/sparkdraft-bench-<preset> (as bench step)")
    ap.add_argument("--checkpoint", help="a checkpoint directory instead of the preset's")
    ap.add_argument("--preset-dir", default=tempfile.gettempdir(),
                    help="where the presets' checkpoints are (default: the temp directory)")
    ap.add_argument("--ctx", type=int, default=4096, help="context positions per request")
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 8, 32], help="requests per step")
    ap.add_argument("--steps", type=int, help="draft tokens N (default and only accepted value: "
                    "the checkpoint's block_size)")
    ap.add_argument("--repeats", type=int, default=20, help="timed repeats (median)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed calls before the repeats")
    ap.add_argument("--seed", type=int, default=20240601, help="seed of the inputs")
    ap.add_argument("--temperature", type=float, default=1.0, help="sampling temperature")
    ap.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu")
    ap.add_argument("--modes", nargs="+", default=["eager", "graph", "compile"],
                    choices=["eager", "graph", "compile"])
    ap.add_argument("--sampler", choices=["triton", "torch"],
                    help="Gumbel-max sampler: triton (vLLM's kernel; default on CUDA) or torch "
                    "(Philox in torch ops; default and only choice on the CPU)")
    ap.add_argument("--json", help="write the records to this file")
    args = ap.parse_args(argv)
    cuda = args.device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        ap.error(f"--device {args.device}: torch sees no CUDA GPU (torch {torch.__version__})")
    if not cuda and args.device != "cpu":
        ap.error(f"--device {args.device}: expected cuda, cuda:N or cpu")
    if not cuda and set(args.modes) - {"eager"}:
        ap.error(f"--modes {' '.join(args.modes)}: graph and compile capture CUDA graphs and "
                 "need a GPU; on the CPU only eager runs")
    if args.sampler is None:
        args.sampler = "triton" if cuda else "torch"
    if args.sampler == "triton" and not cuda:
        ap.error("--sampler triton needs a GPU")
    if args.sampler == "triton" and not HAVE_TRITON:
        ap.error("--sampler triton: Triton is not installed (--sampler torch runs without it)")
    if args.ctx < 1 or min(args.rows) < 1 or args.repeats < 1 or args.warmup < 0:
        ap.error("--ctx, --rows and --repeats must be >= 1, --warmup >= 0")
    if not args.temperature >= 0 or not math.isfinite(args.temperature):
        ap.error("--temperature must be finite and >= 0")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    cuda = args.device.startswith("cuda")
    if cuda and torch.device(args.device).index is not None:
        torch.cuda.set_device(torch.device(args.device))
    path = args.checkpoint or os.path.join(args.preset_dir, f"sparkdraft-bench-{args.preset}")
    if not os.path.isfile(os.path.join(path, "config.json")):
        raise PeerError(f"no checkpoint at {path} (no config.json); write it with\n"
                        f"  build/sparkdraft make-checkpoint --preset {args.preset} --out {path}"
                        "\n(or run `sparkdraft bench step --preset ...`, which writes it there)")
    with open(os.path.join(path, "config.json")) as f:
        cfg = parse_config(json.load(f), os.path.join(path, "config.json"))
    if args.steps is not None and args.steps != cfg.block_size:
        raise PeerError(f"--steps {args.steps}: the checkpoint drafts block_size "
                        f"{cfg.block_size} tokens (make-checkpoint --block-size sets it)")
    progress(f"torch {torch.__version__}, device {args.device}, seed {args.seed}, sampler "
             f"{args.sampler}; loading {path} (H {cfg.hidden_size}, L {cfg.num_layers}, V "
             f"{cfg.vocab_size}, markov_rank {cfg.markov_rank}, N {cfg.block_size})")
    t0 = time.perf_counter()
    peer = PeerDraft(cfg, load_tensors(path, args.device), args.device)
    progress(f"loaded in {time.perf_counter() - t0:.0f} s")
    timer = Timer(args.device)
    gpu = {}
    if cuda:
        p = torch.cuda.get_device_properties(torch.device(args.device))
        gpu = {"gpu": p.name, "sm_count": p.multi_processor_count}
        bw = copy_bandwidth_gbs(args.device)
        progress(f"{p.name}: copy bandwidth {bw:.0f} GB/s")
    records = []
    for rows in args.rows:
        parts = step_floor_bytes(cfg, rows, args.ctx)
        floor = None
        if cuda:
            total = sum(parts.values())
            floor = {"bytes": total, "copy_bandwidth_gbs": bw, "floor_us": total / (bw * 1e9) * 1e6}
        rec = {"bench": "draft_step_peer", "preset": None if args.checkpoint else args.preset,
               "checkpoint": path, "ctx": args.ctx, "steps": cfg.block_size,
               "vocab": cfg.vocab_size, "markov_rank": cfg.markov_rank,
               "hidden": cfg.hidden_size, "layers": cfg.num_layers, "seed": args.seed,
               "temperature": args.temperature, "repeats": args.repeats, "warmup": args.warmup,
               "device": args.device, "torch": torch.__version__,
               "triton": triton.__version__ if HAVE_TRITON else None, "sampler": args.sampler,
               "attention": "F.scaled_dot_product_attention over a contiguous KV cache",
               "bytes_parts": parts, **gpu, **(floor or {})}
        rec.update(run_rows(peer, args, rows, timer, floor, bw if cuda else 0.0))
        records.append(rec)
        if args.json:  # after every row count, so that a late failure keeps the earlier ones
            with open(args.json, "w") as f:
                json.dump(records, f, indent=1, sort_keys=True)
    print()
    print(f"draft step peer (PyTorch {torch.__version__}), {args.device}"
          + (f" {gpu['gpu']}" if gpu else "") + f", ctx {args.ctx}, N {cfg.block_size}, "
          f"median of {args.repeats}")
    head = f"{'preset':<10} {'rows':>5} {'eager us':>10} {'graph us':>10} {'compile+graph':>14}"
    print(head + (f" {'floor us':>9} {'best/floor':>10}" if cuda else ""))
    for r in records:
        vals = [r.get(k + "_us") for k in ("eager", "graph", "compile_graph")]
        cells = " ".join(f"{v:>{w}.1f}" if v is not None else f"{'-':>{w}}"
                         for v, w in zip(vals, (10, 10, 14)))
        line = f"{(r['preset'] or '(ckpt)'):<10} {r['rows']:>5} {cells}"
        if cuda:
            best = min(v for v in vals if v is not None)
            line += f" {r['floor_us']:>9.1f} {best / r['floor_us']:>10.2f}"
        print(line)
    if args.json:
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except PeerError as e:
        print(f"peer_step.py: {e}", file=sys.stderr)
        sys.exit(2)
