"""The fill-in layout from Python (contract.md section 14; the preset tiny-fillin: tiny with
sample_from_anchor false, 1 + 7 query slots, its config.json in the speculators form): the
checkpoint writes and loads that form, propose returns N = 7 tokens and cache rows per row,
the CPU at TP 2 and 4 gives TP 1's bits, and the CPU and the GPU give the same bits; the real
speculators form, without the verifier's embed_tokens and lm_head, drafts the same bits with
them taken from the target model's directory."""

import json
import os
import shutil
import struct

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


def _read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    return {k: v for k, v in header.items() if not k.startswith("__")}, data


def _write_safetensors(path, tensors):
    """tensors: (name, dtype, shape, bytes), laid out in the order given."""
    header, offset = {}, 0
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(t[3] for t in tensors))


def test_a_speculators_checkpoint_takes_the_verifier_weights_from_the_target_model(
    tiny_fillin, tmp_path
):
    # The real speculators form leaves out the verifier's embed_tokens and lm_head: split the
    # preset into such a draft and a target model holding them under its own (HF) names.
    header, data = _read_safetensors(os.path.join(tiny_fillin.dir, "model.safetensors"))
    draft, target = tmp_path / "draft", tmp_path / "target"
    draft.mkdir()
    target.mkdir()
    shutil.copy(os.path.join(tiny_fillin.dir, "config.json"), draft / "config.json")
    kept, moved = [], []
    for name, t in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        raw = data[t["data_offsets"][0] : t["data_offsets"][1]]
        entry = (name, t["dtype"], t["shape"], raw)
        if name == "embed_tokens.weight":
            moved.append(("model." + name,) + entry[1:])
        elif name == "lm_head.weight":
            moved.append(entry)
        else:
            kept.append(entry)
    assert len(moved) == 2
    _write_safetensors(draft / "model.safetensors", kept)
    _write_safetensors(target / "model.safetensors", moved)
    with pytest.raises(sparkdraft.CheckpointError, match="target-model"):
        sparkdraft.Checkpoint(draft)
    ck = sparkdraft.Checkpoint(draft, target_model=target)
    _, want = drafted(tiny_fillin, "cpu")
    _, got = drafted(ck, "cpu")
    np.testing.assert_array_equal(bits(got["out_tokens"]), bits(want["out_tokens"]))
    np.testing.assert_array_equal(bits(got["out_draft_logits"]), bits(want["out_draft_logits"]))
