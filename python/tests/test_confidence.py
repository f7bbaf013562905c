"""The confidence head from Python (contract.md section 9): propose writes one float32
value per drafted position into ``out_confidences``, in [0, 1], +0 on padding rows, the
same bits on the CPU and the GPU; a draft without the head refuses the output."""

import numpy as np
import pytest
import torch

import sparkdraft
from conftest import OPTS, require_cuda
from util import bits, context_inputs, propose_inputs


@pytest.fixture(scope="module")
def tiny_conf(tmp_path_factory):
    """The tiny preset with the confidence head on [h ; w1[prev]], seed 3."""
    return sparkdraft.make_checkpoint(tmp_path_factory.mktemp("tiny_conf"), "tiny-conf", seed=3)


def drafted(ckpt, device, seed=21, rows=5, padding=(1,)):
    d = sparkdraft.Draft(ckpt, device, **OPTS)
    ctx, lengths = context_inputs(d, rows, seed, device)
    prop = propose_inputs(d, lengths, seed, device, padding=padding)
    N = ckpt.config["block_size"]
    prop["out_confidences"] = torch.full((rows, N), -1.0, dtype=torch.float32, device=device)
    d.store_context(**ctx)
    d.propose(**prop)
    return prop


def test_confidences_on_the_cpu(tiny_conf):
    c = tiny_conf.config
    assert c["enable_confidence_head"] and c["confidence_head_with_markov"]
    assert any(p["part"] == "confidence head" for p in sparkdraft.Draft(tiny_conf, "cpu", **OPTS).plan)
    prop = drafted(tiny_conf, "cpu")
    conf = prop["out_confidences"].numpy()
    assert np.all(bits(prop["out_confidences"])[1] == 0), "the padding row is not +0"
    real = np.delete(conf, 1, axis=0)
    assert np.all((real >= 0) & (real <= 1)) and len(np.unique(real)) > 1
    again = drafted(tiny_conf, "cpu")
    np.testing.assert_array_equal(bits(again["out_confidences"]), bits(prop["out_confidences"]))


def test_cpu_and_cuda_give_the_same_confidences(tiny_conf):
    require_cuda()
    cpu = drafted(tiny_conf, "cpu")
    gpu = drafted(tiny_conf, "cuda")
    np.testing.assert_array_equal(bits(gpu["out_tokens"]), bits(cpu["out_tokens"]))
    np.testing.assert_array_equal(bits(gpu["out_confidences"]), bits(cpu["out_confidences"]))


def test_a_draft_without_the_head_refuses_the_output(tiny):
    d = sparkdraft.Draft(tiny, "cpu", **OPTS)
    ctx, lengths = context_inputs(d, 2, 5)
    prop = propose_inputs(d, lengths, 5)
    prop["out_confidences"] = torch.zeros((2, tiny.config["block_size"]), dtype=torch.float32)
    d.store_context(**ctx)
    with pytest.raises(sparkdraft.InvalidArgument, match="enable_confidence_head"):
        d.propose(**prop)


def test_a_misshapen_output_is_refused(tiny_conf):
    d = sparkdraft.Draft(tiny_conf, "cpu", **OPTS)
    ctx, lengths = context_inputs(d, 2, 6)
    prop = propose_inputs(d, lengths, 6)
    d.store_context(**ctx)
    for bad in (torch.zeros((2, 3), dtype=torch.float32), torch.zeros((2, 7), dtype=torch.float64)):
        prop["out_confidences"] = bad
        with pytest.raises(sparkdraft.InvalidArgument, match="out_confidences"):
            d.propose(**prop)
