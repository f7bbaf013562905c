"""The PyTorch peer of the draft step (bench/peer/peer_step.py) computes sparkdraft's step.

The peer is a speed peer, not a bit-exact one: bf16 PyTorch ops round in their own order
(F.linear, SDPA), so its values differ from sparkdraft's in the last bits. What is checked, on
tiny checkpoints on the CPU, against sparkdraft's CPU backend (the reference of contract.md
section 3) after both stored the same context and proposed from the same anchors and seeds:

- the KV cache every layer holds (the context chain and the query block's K/V): within
  KV_TOL of the largest |value|;
- the step logits: the peer's base + Markov bias + transform of each step, fed the
  predecessor sparkdraft drew (the draft tokens chain the steps, so one differing draw would
  change every later step), against sparkdraft's draft-logits cache: within LOGIT_TOL;
- the drafted tokens of the peer's own Markov loop (its torch Philox sampler): equal to
  sparkdraft's up to the first differing draw of a row, and at least MIN_TOKENS_EQUAL of them;
- the Philox stream of contract.md section 4 (its test vectors, bit for bit);
- that the comparison can fail: a peer whose layer 1 skips its post-attention norm, or whose
  Markov loop drops the bias, is caught.

Both the Qwen3 style (pre-norm, bf16 residual, NeoX RoPE) and the Muse style (sandwich norms,
fp32 norm-preserving residual, GPT-J RoPE, output gate and o-norm, a causal sliding window of 16
positions on layer 0, the logit multiplier and soft cap) are checked.
"""

import importlib.util
import json
import math
import os

import pytest
import torch

import sparkdraft

_PATH = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "peer", "peer_step.py")
_spec = importlib.util.spec_from_file_location("peer_step", _PATH)
peer_step = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(peer_step)

ROWS, CTX, SEED = 3, 40, 20240601
KV_TOL = 0.02  # of the largest |K| or |V| of a layer
LOGIT_TOL = 0.0625  # absolute: 2 bf16 ulps at the largest logits (4 to 8: ulp 2^-5)
MIN_TOKENS_EQUAL = 0.8


@pytest.fixture(scope="module", params=["qwen3", "muse"])
def ckpt(request, tmp_path_factory):
    d = tmp_path_factory.mktemp(f"peer-{request.param}")
    if request.param == "qwen3":
        return sparkdraft.make_checkpoint(d, "tiny", seed=3)
    window = [{"window": 16, "causal": True}, {"window": 0, "causal": False}]
    return sparkdraft.make_checkpoint(d, "tiny", style="muse", seed=3, layer_attention=window)


def load_peer(ck):
    with open(os.path.join(ck.dir, "config.json")) as f:
        cfg = peer_step.parse_config(json.load(f))
    return peer_step.PeerDraft(cfg, peer_step.load_tensors(ck.dir, "cpu"), "cpu")


def run_both(ck, peer):
    """The same context and propose in sparkdraft (CPU backend) and the peer."""
    cfg = ck.config
    N, V, L = cfg["block_size"], cfg["vocab_size"], cfg["num_layers"]
    kvh, hd = cfg["num_kv_heads"], cfg["head_dim"]
    W = len(cfg["target_layer_ids"]) * cfg["target_hidden_size"]
    ps = 16
    P = (CTX + N + ps - 1) // ps
    kv = [torch.zeros((ROWS * P * ps, kvh, 2 * hd), dtype=torch.bfloat16) for _ in range(L)]
    d = sparkdraft.Draft(ck, "cpu", max_reqs=ROWS, num_pages=ROWS * P, page_size=ps,
                         max_pages_per_req=P, cache_slots=ROWS, kv_caches=kv)
    g = torch.Generator().manual_seed(SEED)
    print(f"seed {SEED}")
    hidden = (torch.rand((ROWS, CTX, W), generator=g) * 4 - 2).to(torch.bfloat16)
    pos = torch.arange(CTX, dtype=torch.int64)
    slots = torch.cat([r * P * ps + pos for r in range(ROWS)])
    d.store_context(hidden.reshape(ROWS * CTX, W), pos.repeat(ROWS), slots)
    anchors = torch.randint(0, V, (ROWS,), generator=g)
    positions = torch.full((ROWS,), CTX, dtype=torch.int64)
    seeds = torch.randint(0, 2**40, (ROWS,), generator=g)
    temps = torch.tensor([1.0, 0.0, 0.7])
    tables = torch.arange(ROWS * P, dtype=torch.int32).reshape(ROWS, P)
    tokens = torch.full((ROWS, N), -1, dtype=torch.int64)
    cache = torch.zeros((ROWS, N, V), dtype=torch.bfloat16)
    d.propose(anchors, positions, seeds, temps, torch.arange(ROWS), tables, tokens, cache)

    peer.allocate(ROWS, CTX)
    for r in range(ROWS):
        peer.store_context(r, hidden[r])
    base = peer.base_logits(anchors)
    p_tokens = torch.full((ROWS, N), -1, dtype=torch.int64)
    p_cache = torch.zeros((ROWS, N, V), dtype=torch.bfloat16)
    peer.markov_loop(base, anchors, positions, seeds, temps, p_tokens, p_cache, "torch")
    forced = torch.stack([peer.step_logits(base[:, j], anchors if j == 0 else tokens[:, j - 1])
                          for j in range(N)], 1)
    # sparkdraft's cache [slots, kv_heads, 2 hd] -> [rows, kv_heads, ctx + N, hd] K and V
    sd_k = [c.view(ROWS, P * ps, kvh, 2 * hd)[:, :CTX + N, :, :hd].transpose(1, 2) for c in kv]
    sd_v = [c.view(ROWS, P * ps, kvh, 2 * hd)[:, :CTX + N, :, hd:].transpose(1, 2) for c in kv]
    return dict(tokens=tokens, cache=cache, p_tokens=p_tokens, p_cache=p_cache, forced=forced,
                sd_k=sd_k, sd_v=sd_v)


def forced_logit_diff(out):
    return (out["forced"].float() - out["cache"].float()).abs().max().item()


def test_philox_is_the_contract_stream():
    t = lambda v: torch.tensor(v, dtype=torch.int64)  # noqa: E731
    for seed, off, value in [(0, 0, 1713891541), (12345, 77, 668326920), (-5, 9, 2883358565),
                             (2**40 + 987654321, 2**30 + 4096, 1595797246),
                             (12345, 77 + 2**30, 2211821518)]:
        assert int(peer_step.philox_randint(t(seed), t(off))) == value
    u = peer_step.philox_uniform(peer_step.philox_randint(t(12345), t(77)), torch.arange(3))
    assert u.view(torch.int32).tolist() == [0x3F676738, 0x3F3B829F, 0x3F19F4CC]
    # The worked step of contract.md section 4: seed 12345, a = 70, j = 7.
    logits = torch.tensor([[1.0, 1.5, 1.25, 1.5]] * 2).to(torch.bfloat16)
    cache = torch.zeros_like(logits)
    tok = peer_step.gumbel_sample_torch(logits, cache, torch.tensor([0.0, 1.0]), t([12345] * 2),
                                        t([77 + 2**30] * 2))
    assert tok.tolist() == [1, 2] and torch.equal(cache, logits)


def test_peer_computes_the_step(ckpt):
    peer = load_peer(ckpt)
    out = run_both(ckpt, peer)
    N = ckpt.config["block_size"]
    for layer in range(ckpt.config["num_layers"]):
        for name, sd, pe in (("K", out["sd_k"], peer.k_cache), ("V", out["sd_v"], peer.v_cache)):
            ref = sd[layer].float()
            diff = (pe[layer].float() - ref).abs().max().item()
            scale = ref.abs().max().item()
            print(f"layer {layer} {name}: max |diff| {diff:.4g} of max |value| {scale:.4g}")
            assert diff <= KV_TOL * scale, f"layer {layer} {name} cache differs by {diff}"
    diff = forced_logit_diff(out)
    print(f"step logits (sparkdraft's predecessors): max |diff| {diff:.4g} of max |logit| "
          f"{out['cache'].float().abs().max().item():.4g}")
    assert diff <= LOGIT_TOL
    same = out["p_tokens"] == out["tokens"]
    print(f"tokens equal {int(same.sum())}/{same.numel()}:\n{out['tokens']}\n{out['p_tokens']}")
    assert same.float().mean().item() >= MIN_TOKENS_EQUAL
    for r in range(ROWS):  # a row agrees until its first differing draw, and there the logits do
        first = int((~same[r]).nonzero()[0]) if not same[r].all() else N
        d = (out["p_cache"][r, :first + 1] - out["cache"][r, :first + 1]).float().abs().max()
        assert d.item() <= LOGIT_TOL


def test_the_comparison_catches_a_dropped_norm(ckpt, monkeypatch):
    peer = load_peer(ckpt)
    dropped = peer.layers[1]["pre_ffn_norm" if "pre_ffn_norm" in peer.layers[1]
                             else "post_attn_norm"]
    real = peer_step.rms_norm

    def rms_norm(x, weight, gain, eps):  # layer 1's norm before its MLP becomes the identity
        return x.to(torch.bfloat16) if weight is dropped else real(x, weight, gain, eps)

    monkeypatch.setattr(peer_step, "rms_norm", rms_norm)
    diff = forced_logit_diff(run_both(ckpt, peer))
    print(f"without layer 1's pre-MLP norm: max |diff| {diff:.4g}")
    assert diff > 4 * LOGIT_TOL


def test_the_comparison_catches_a_missing_markov_bias(ckpt):
    peer = load_peer(ckpt)
    peer.w1 = torch.zeros_like(peer.w1)  # bias = w2 @ 0
    diff = forced_logit_diff(run_both(ckpt, peer))
    print(f"without the Markov bias: max |diff| {diff:.4g}")
    assert diff > 4 * LOGIT_TOL


def test_refusals_are_clear(tmp_path):
    cfg = sparkdraft.preset_config("tiny-d2t")
    with pytest.raises(peer_step.PeerError, match="reduced draft vocabulary"):
        peer_step.parse_config(cfg)
    with pytest.raises(SystemExit):
        peer_step.parse_args(["--device", "cpu", "--modes", "eager", "compile"])
    with pytest.raises(peer_step.PeerError, match="make-checkpoint"):
        peer_step.main(["--device", "cpu", "--modes", "eager", "--preset", "tiny",
                        "--preset-dir", str(tmp_path)])


def test_cli_runs_on_the_cpu(ckpt, tmp_path, capsys):
    out = tmp_path / "peer.json"
    assert peer_step.main(["--device", "cpu", "--modes", "eager", "--checkpoint", ckpt.dir,
                           "--ctx", "20", "--rows", "1", "2", "--repeats", "2", "--json",
                           str(out)]) == 0
    recs = json.loads(out.read_text())
    assert [r["rows"] for r in recs] == [1, 2]
    assert all(r["bench"] == "draft_step_peer" and math.isfinite(r["eager_us"]) for r in recs)
    assert "eager us" in capsys.readouterr().out


def test_floor_bytes_are_bench_steps():
    """The peer's bytes per step are `sparkdraft bench step`'s (docs/results/bench_step.json)."""
    path = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "results",
                        "bench_step.json")
    with open(path) as f:
        records = [r for r in json.load(f) if r.get("tp", 1) == 1 and r.get("preset")]
    assert records
    for r in records:
        cfg = peer_step.parse_config(sparkdraft.preset_config(r["preset"]))
        assert peer_step.step_floor_bytes(cfg, r["rows"], r["ctx"]) == r["bytes_parts"]
