"""A reduced draft vocabulary from Python (contract.md section 11; the preset tiny-d2t: 612
draft ids of the 1000 target ids, a d2t map): propose returns target ids, the cache rows
are V wide with bf16 -inf outside the map, the CPU and the GPU (the eager Markov loop at
TP 1) give the same bits, and the verifier reads those rows."""

import numpy as np
import pytest
import torch

import sparkdraft
from conftest import OPTS, require_cuda
import util
from util import bits

NEG_INF_BF16 = np.int16(-128)  # 0xff80, as util.bits reads bf16 (int16)


@pytest.fixture(scope="module")
def tiny_d2t(tmp_path_factory):
    return sparkdraft.make_checkpoint(tmp_path_factory.mktemp("tiny_d2t"), "tiny-d2t", seed=3)


def drafted(ckpt, device, seed=31, rows=5, padding=(2,)):
    return util.drafted(ckpt, device, seed, rows, padding, OPTS)


def draft_image(d):
    """The target ids of the draft vocabulary, from the cache: the columns not -inf in
    every written row (a logit of exactly -inf inside the map would need base + bias =
    -inf, which the synthetic weights do not give)."""
    rows = bits(d).reshape(-1, d.shape[-1])
    return np.where(np.any(rows != NEG_INF_BF16, axis=0))[0]


def test_tokens_are_target_ids_and_the_cache_is_v_wide(tiny_d2t):
    c = tiny_d2t.config
    assert c["draft_vocab_size"] == 612 and c["vocab_size"] == 1000
    _, prop = drafted(tiny_d2t, "cpu")
    slots = prop["cache_slots"].numpy()
    written = prop["out_draft_logits"][torch.from_numpy(slots[slots >= 0])]
    inside = draft_image(written)
    assert len(inside) == 612, f"{len(inside)} columns hold draft logits, want 612"
    tokens = prop["out_tokens"].numpy()
    real = np.delete(tokens, 2, axis=0)
    assert np.all(np.isin(real, inside)), "a drafted token outside the draft vocabulary"


def test_cpu_and_cuda_give_the_same_bits(tiny_d2t):
    require_cuda()
    _, cpu = drafted(tiny_d2t, "cpu")
    d, gpu = drafted(tiny_d2t, "cuda")
    np.testing.assert_array_equal(bits(gpu["out_tokens"]), bits(cpu["out_tokens"]))
    np.testing.assert_array_equal(bits(gpu["out_draft_logits"]), bits(cpu["out_draft_logits"]))
    assert any("reduced draft vocabulary" in p["reason"] for p in d.plan), d.plan


def test_a_target_equal_to_the_draft_accepts_every_draft(tiny_d2t, device):
    """The verifier reads the V-wide rows (q = 0 outside the map): with the target's
    logits equal to the draft's cache rows, every draft of every real row is accepted
    (p = q), and the bonus is drawn from the target's last row."""
    d, p = drafted(tiny_d2t, device, seed=41)
    R, N = p["out_tokens"].shape
    V = tiny_d2t.config["vocab_size"]
    slots = p["cache_slots"].cpu().numpy()
    gen = torch.Generator().manual_seed(41)
    target = (torch.rand((R, N + 1, V), generator=gen) * 16 - 8).to(device)
    for r in range(R):
        if slots[r] >= 0:
            target[r, :N] = p["out_draft_logits"][slots[r]].float()
    out_k = torch.full((R,), -9, dtype=torch.int32, device=device)
    out_t = torch.full((R, N + 1), -9, dtype=torch.int64, device=device)
    d.verify(draft_tokens=p["out_tokens"], anchor_positions=p["anchor_positions"], seeds=p["seeds"],
             temperatures=p["temperatures"], cache_slots=p["cache_slots"],
             draft_logits=p["out_draft_logits"], target_logits=target,
             out_num_accepted=out_k, out_tokens=out_t)
    real = slots >= 0
    assert np.all(out_k.cpu().numpy()[real] == N), out_k
    np.testing.assert_array_equal(out_t.cpu().numpy()[real, :N], p["out_tokens"].cpu().numpy()[real])
