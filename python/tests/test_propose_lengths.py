"""Per-request lengths in propose from Python (contract.md 9.5): ``lengths[r]`` drafts the
first lengths[r] steps of row r bit for bit as a call without lengths, -1 tokens and +0
confidences past it, and the cache rows past it keep what the caller had there; lengths
outside [0, N] are refused on the host. On every device (CUDA skips without a GPU)."""

import numpy as np
import pytest
import torch

import sparkdraft
from conftest import OPTS
from util import bits, context_inputs, propose_inputs


@pytest.fixture(scope="module")
def tiny_conf(tmp_path_factory):
    return sparkdraft.make_checkpoint(tmp_path_factory.mktemp("tiny_conf_len"), "tiny-conf", seed=3)


def run(ckpt, device, lengths=None, seed=31, rows=5, padding=(1,)):
    d = sparkdraft.Draft(ckpt, device, **OPTS)
    ctx, ctx_len = context_inputs(d, rows, seed, device)
    prop = propose_inputs(d, ctx_len, seed, device, padding=padding)
    # A recognisable cache: every entry 0x3f80 (1.0) before the call.
    prop["out_draft_logits"].fill_(1.0)
    if ckpt.config.get("enable_confidence_head"):
        prop["out_confidences"] = torch.full((rows, ckpt.config["block_size"]), -1.0, device=device)
    if lengths is not None:
        prop["lengths"] = torch.tensor(lengths, dtype=torch.int32, device=device)
    d.store_context(**ctx)
    d.propose(**prop)
    return prop


def test_lengths_draft_the_prefix_of_the_full_block(tiny_conf, device):
    N = tiny_conf.config["block_size"]
    lengths = [N, 9, 0, 3, 1]  # row 1 is padding: its length is never read
    full = run(tiny_conf, device)
    part = run(tiny_conf, device, lengths)
    slots = part["cache_slots"].cpu().numpy()
    tok, tok_full = bits(part["out_tokens"]), bits(full["out_tokens"])
    conf, conf_full = bits(part["out_confidences"]), bits(full["out_confidences"])
    cache, cache_full = bits(part["out_draft_logits"]), bits(full["out_draft_logits"])
    one = np.int16(0x3F80)
    for r, n in enumerate(lengths):
        if slots[r] < 0:
            continue
        np.testing.assert_array_equal(tok[r, :n], tok_full[r, :n], err_msg=f"row {r} tokens")
        assert np.all(tok[r, n:] == -1), f"row {r}: tokens past length {n}: {tok[r]}"
        np.testing.assert_array_equal(conf[r, :n], conf_full[r, :n], err_msg=f"row {r} conf")
        assert np.all(conf[r, n:] == 0), f"row {r}: confidences past length {n}"
        s = slots[r]
        np.testing.assert_array_equal(cache[s, :n], cache_full[s, :n], err_msg=f"row {r} cache")
        assert np.all(cache[s, n:] == one), f"row {r}: a cache row past length {n} was written"


def test_lengths_outside_the_block_are_refused(tiny, device):
    N = tiny.config["block_size"]
    for bad in (-1, N + 1):
        with pytest.raises(sparkdraft.InvalidArgument, match=f"length {bad}"):
            run(tiny, device, [bad, 0, 1, 1, 1], padding=())
    with pytest.raises(sparkdraft.InvalidArgument, match="lengths"):
        run(tiny, device, [1, 1, 1], padding=())  # three lengths for five rows
