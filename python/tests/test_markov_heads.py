"""The gated and rnn Markov heads from Python (contract.md section 13; the presets tiny-gated
and tiny-rnn): the checkpoints load with their config and projection, the head changes the
draft (the vanilla tiny of the same seed drafts otherwise), a markov_head_type override on tiny
gives the preset's bits, the CPU backend at TP 2 and 4 gives TP 1's bits, refusals name the
field, and the CPU and the GPU (the eager Markov loop at TP 1) give the same bits."""

import numpy as np
import pytest

import sparkdraft
from conftest import OPTS, require_cuda
import util
from util import bits

TYPES = ("gated", "rnn")


@pytest.fixture(scope="module", params=TYPES)
def head(request, tmp_path_factory):
    t = request.param
    return t, sparkdraft.make_checkpoint(tmp_path_factory.mktemp(f"tiny_{t}"), f"tiny-{t}", seed=3)


def drafted(ckpt, device, seed=41, rows=5, padding=(2,), **options):
    return util.drafted(ckpt, device, seed, rows, padding, {**OPTS, **options})


def same(a, b):
    np.testing.assert_array_equal(bits(a["out_tokens"]), bits(b["out_tokens"]))
    np.testing.assert_array_equal(bits(a["out_draft_logits"]), bits(b["out_draft_logits"]))


def test_loads_and_changes_the_draft(head, tmp_path):
    t, ckpt = head
    assert ckpt.config["markov_head_type"] == t
    assert any(f"{t} Markov head" in p["reason"] for p in ckpt.plan), ckpt.plan
    vanilla = sparkdraft.make_checkpoint(tmp_path / "vanilla", "tiny", seed=3)
    assert vanilla.config.get("markov_head_type", "vanilla") == "vanilla"
    _, a = drafted(ckpt, "cpu")
    _, b = drafted(vanilla, "cpu")
    assert not np.array_equal(bits(a["out_draft_logits"]), bits(b["out_draft_logits"]))


def test_override_is_the_preset(head, tmp_path):
    t, ckpt = head
    over = sparkdraft.make_checkpoint(tmp_path / "over", "tiny", seed=3, markov_head_type=t)
    _, a = drafted(ckpt, "cpu")
    _, b = drafted(over, "cpu")
    same(a, b)


def test_cpu_tp_gives_tp1_bits(head):
    _, ckpt = head
    _, one = drafted(ckpt, "cpu")
    for tp in (2, 4):
        _, many = drafted(ckpt, "cpu", tp=tp)
        same(one, many)


def test_refusals_name_the_field(tmp_path):
    with pytest.raises(Exception, match="markov_head_type"):
        sparkdraft.make_checkpoint(tmp_path / "bad", "tiny", seed=3, markov_head_type="lstm")
    with pytest.raises(Exception, match="markov_head_type"):
        sparkdraft.make_checkpoint(
            tmp_path / "topk", "tiny", seed=3, markov_head_type="gated", markov_topk=8
        )


def test_cpu_and_cuda_give_the_same_bits(head):
    require_cuda()
    t, ckpt = head
    _, cpu = drafted(ckpt, "cpu")
    d, gpu = drafted(ckpt, "cuda")
    same(gpu, cpu)
    assert any(f"{t} Markov head" in p["reason"] for p in d.plan), d.plan


@pytest.mark.parametrize("t", TYPES)
def test_with_the_fill_in_layout(t, tmp_path):
    """A head in the fill-in layout (contract.md sections 13 and 14): the head reads the drafted
    rows' hidden states; CPU TP 2 == TP 1, and CPU == CUDA where there is a GPU."""
    ckpt = sparkdraft.make_checkpoint(tmp_path / t, "tiny-fillin", seed=3, markov_head_type=t)
    assert ckpt.config["markov_head_type"] == t and not ckpt.config["sample_from_anchor"]
    _, a = drafted(ckpt, "cpu")
    _, b = drafted(ckpt, "cpu", tp=2)
    same(a, b)
    plain = sparkdraft.make_checkpoint(tmp_path / "plain", "tiny-fillin", seed=3)
    _, c = drafted(plain, "cpu")
    assert not np.array_equal(bits(a["out_draft_logits"]), bits(c["out_draft_logits"]))


@pytest.mark.parametrize("t", TYPES)
def test_with_the_fill_in_layout_cpu_equals_cuda(t, tmp_path):
    require_cuda()
    ckpt = sparkdraft.make_checkpoint(tmp_path / t, "tiny-fillin", seed=3, markov_head_type=t)
    _, a = drafted(ckpt, "cpu")
    _, g = drafted(ckpt, "cuda")
    same(g, a)
