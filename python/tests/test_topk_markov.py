"""The top-k Markov loop from Python (contract.md section 12; the preset tiny-topk: tiny with
markov_topk 16): the checkpoint loads with its config, every written cache row holds exactly
16 entries that are not bf16 -inf (the synthetic weights are finite) and the drafted token is
one of them, k = V gives the dense loop's bits, and the CPU and the GPU (the eager Markov loop
at TP 1) give the same bits. The union form (section 12.5, preset tiny-topk-union: markov_bias_topk
8) holds between 16 and 24 candidates a row, and its CPU and GPU bits agree too."""

import numpy as np
import pytest
import torch

import sparkdraft
from conftest import OPTS, require_cuda
import util
from util import bits

NEG_INF_BF16 = np.int16(-128)  # 0xff80, as util.bits reads bf16 (int16)


@pytest.fixture(scope="module")
def tiny_topk(tmp_path_factory):
    return sparkdraft.make_checkpoint(tmp_path_factory.mktemp("tiny_topk"), "tiny-topk", seed=3)


def drafted(ckpt, device, seed=37, rows=5, padding=(2,)):
    return util.drafted(ckpt, device, seed, rows, padding, OPTS)


def test_every_row_holds_k_candidates_and_the_token_is_one(tiny_topk):
    c = tiny_topk.config
    assert c["markov_topk"] == 16 and c["vocab_size"] == 1000
    _, prop = drafted(tiny_topk, "cpu")
    slots = prop["cache_slots"].numpy()
    tokens = prop["out_tokens"].numpy()
    checked = 0
    for r, slot in enumerate(slots):
        if slot < 0:
            continue
        rows = bits(prop["out_draft_logits"][int(slot)])  # [N, V] int16
        for j in range(rows.shape[0]):
            finite = np.where(rows[j] != NEG_INF_BF16)[0]
            assert len(finite) == 16, f"row {r} step {j}: {len(finite)} candidates"
            assert tokens[r, j] in finite, f"row {r} step {j}: token {tokens[r, j]} off the candidates"
            checked += 1
    assert checked == 4 * rows.shape[0]


def test_k_equal_to_the_vocabulary_is_the_dense_loop(tmp_path):
    dense = sparkdraft.make_checkpoint(tmp_path / "dense", "tiny", seed=3)
    full = sparkdraft.make_checkpoint(tmp_path / "full", "tiny", seed=3, markov_topk=1000)
    assert full.config["markov_topk"] == 1000
    _, a = drafted(dense, "cpu")
    _, b = drafted(full, "cpu")
    np.testing.assert_array_equal(bits(a["out_tokens"]), bits(b["out_tokens"]))
    np.testing.assert_array_equal(bits(a["out_draft_logits"]), bits(b["out_draft_logits"]))


def test_refusals_name_the_field(tmp_path):
    with pytest.raises(Exception, match="markov_topk"):
        sparkdraft.make_checkpoint(tmp_path / "bad", "tiny", seed=3, markov_topk=1001)


def test_cpu_and_cuda_give_the_same_bits(tiny_topk):
    require_cuda()
    _, cpu = drafted(tiny_topk, "cpu")
    d, gpu = drafted(tiny_topk, "cuda")
    np.testing.assert_array_equal(bits(gpu["out_tokens"]), bits(cpu["out_tokens"]))
    np.testing.assert_array_equal(bits(gpu["out_draft_logits"]), bits(cpu["out_draft_logits"]))
    assert any("top-k Markov loop" in p["reason"] for p in d.plan), d.plan


@pytest.fixture(scope="module")
def tiny_union(tmp_path_factory):
    return sparkdraft.make_checkpoint(tmp_path_factory.mktemp("tiny_union"), "tiny-topk-union", seed=3)


def test_the_union_form_adds_the_bias_candidates(tiny_union, tmp_path):
    c = tiny_union.config
    assert c["markov_topk"] == 16 and c["markov_bias_topk"] == 8
    _, prop = drafted(tiny_union, "cpu")
    slots = prop["cache_slots"].numpy()
    tokens = prop["out_tokens"].numpy()
    more = 0
    for r, slot in enumerate(slots):
        if slot < 0:
            continue
        rows = bits(prop["out_draft_logits"][int(slot)])
        for j in range(rows.shape[0]):
            finite = np.where(rows[j] != NEG_INF_BF16)[0]
            assert 16 <= len(finite) <= 24, f"row {r} step {j}: {len(finite)} candidates"
            assert tokens[r, j] in finite
            more += len(finite) > 16
    assert more > 0, "no step took a candidate from the bias"
    with pytest.raises(Exception, match="markov_bias_topk"):
        sparkdraft.make_checkpoint(tmp_path / "bad", "tiny", seed=3, markov_bias_topk=4)


def test_the_union_form_cpu_and_cuda_give_the_same_bits(tiny_union):
    require_cuda()
    _, cpu = drafted(tiny_union, "cpu")
    _, gpu = drafted(tiny_union, "cuda")
    np.testing.assert_array_equal(bits(gpu["out_tokens"]), bits(cpu["out_tokens"]))
    np.testing.assert_array_equal(bits(gpu["out_draft_logits"]), bits(cpu["out_draft_logits"]))
