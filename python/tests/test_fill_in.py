"""The fill-in layout from Python (contract.md section 14; the preset tiny-fillin: tiny with
sample_from_anchor false, 1 + 7 query slots, its config.json in the speculators form): the
checkpoint writes and loads that form, propose returns N = 7 tokens and cache rows per row,
the CPU at TP 2 and 4 gives TP 1's bits, and the CPU and the GPU give the same bits."""

import json
import os

import numpy as np
import pytest

import sparkdraft
from conftest import OPTS, require_cuda
import util
from util import bits


@pytest.fixture(scope="module")
def tiny_fillin(tmp_path_factory):
    return sparkdraft.make_checkpoint(tmp_path_factory.mktemp("tiny_fillin"), "tiny-fillin", seed=3)


def drafted(ckpt, device, seed=41, rows=5, padding=(2,), **options):
    return util.drafted(ckpt, device, seed, rows, padding, dict(OPTS, **options))


def test_the_speculators_form_is_written_and_loads(tiny_fillin):
    c = tiny_fillin.config
    assert c["sample_from_anchor"] is False and c["block_size"] == 7
    with open(os.path.join(tiny_fillin.dir, "config.json")) as f:
        on_disk = json.load(f)
    assert on_disk["speculators_model_type"] == "dspark"
    assert on_disk["architectures"] == ["DSparkDraftModel"]
    assert on_disk["block_size"] == 8  # the query slots: 1 + N
    assert on_disk["sample_from_anchor"] is False
    assert on_disk["transformer_layer_config"]["hidden_size"] == 64
    preset = sparkdraft.preset_config("tiny-fillin")
    assert {k: v for k, v in c.items() if k != "architecture"} == {
        k: v for k, v in preset.items() if k != "architecture"
    }
    assert any(p["part"] == "layout" and p["variant"] == "fill-in" for p in tiny_fillin.plan)


def test_propose_returns_n_tokens_and_tp_ranks_give_the_same_bits(tiny_fillin):
    _, one = drafted(tiny_fillin, "cpu")
    tokens = one["out_tokens"].numpy()
    assert tokens.shape == (5, 7)
    slots = one["cache_slots"].numpy()
    for r, slot in enumerate(slots):
        if slot < 0:
            continue
        assert np.all((tokens[r] >= 0) & (tokens[r] < 1000)), tokens[r]
        assert len(np.unique(bits(one["out_draft_logits"][int(slot)]))) > 1
    for tp in (2, 4):
        _, many = drafted(tiny_fillin, "cpu", tp=tp)
        np.testing.assert_array_equal(bits(many["out_tokens"]), bits(one["out_tokens"]))
        np.testing.assert_array_equal(bits(many["out_draft_logits"]), bits(one["out_draft_logits"]))


def test_cpu_and_cuda_give_the_same_bits(tiny_fillin):
    require_cuda()
    _, cpu = drafted(tiny_fillin, "cpu")
    d, gpu = drafted(tiny_fillin, "cuda")
    np.testing.assert_array_equal(bits(gpu["out_tokens"]), bits(cpu["out_tokens"]))
    np.testing.assert_array_equal(bits(gpu["out_draft_logits"]), bits(cpu["out_draft_logits"]))
    assert any(p["part"] == "layout" for p in d.plan), d.plan
