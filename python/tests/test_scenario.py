"""Python's view equals the C++ API's: the scenario of `sparkdraft check` and the demo
(runtime/scenario.h) runs through the C++ API on the CPU backend, every call recorded;
the same calls replayed through the Python API (DLPack, zero-copy) on each backend give
the same tokens, draft-logits cache rows and KV caches, bit for bit."""

import numpy as np
import pytest
import torch

import sparkdraft
from sparkdraft import _core
from util import bits


@pytest.mark.parametrize("ids,padding,rounds,seed", [([0, 1, 2], [], 3, 1), ([4, 2, 7], [1], 2, 9)])
def test_python_replays_the_scenario_bit_for_bit(tiny, device, ids, padding, rounds, seed):
    print(f"scenario seed {seed}, requests {ids}, padding rows {padding}")
    trace = _core.scenario_trace(tiny._ck, ids, padding, rounds, seed)
    o = trace["options"]
    assert o["tp"] == 1
    d = sparkdraft.Draft(tiny, device, **{k: v for k, v in o.items() if k != "tp"})
    N, V = tiny.config["block_size"], tiny.config["vocab_size"]
    dev = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(device)  # noqa: E731
    proposes = 0
    for step in trace["steps"]:
        if step["kind"] == "store_context":
            d.store_context(dev(step["hidden"]).view(torch.bfloat16), dev(step["positions"]),
                            dev(step["slots"]))
            continue
        proposes += 1
        R = step["anchor_tokens"].shape[0]
        out_tokens = torch.full((R, N), -1, dtype=torch.int64, device=device)
        cache = torch.zeros((o["cache_slots"], N, V), dtype=torch.bfloat16, device=device)
        d.propose(dev(step["anchor_tokens"]), dev(step["anchor_positions"]), dev(step["seeds"]),
                  dev(step["temperatures"]), dev(step["cache_slots"]), dev(step["block_tables"]),
                  out_tokens, cache)
        if device == "cuda":
            torch.cuda.synchronize()
        used = step["cache_slots"] >= 0
        np.testing.assert_array_equal(bits(out_tokens)[used], step["tokens"][used],
                                      err_msg=f"propose {proposes}: tokens")
        rows = bits(cache).view(np.uint16)[step["cache_slots"][used]]
        np.testing.assert_array_equal(rows, step["logits"], err_msg=f"propose {proposes}: cache rows")
    assert proposes == rounds
    for l, kv in enumerate(trace["kv_caches"]):
        np.testing.assert_array_equal(d.kv_cache_copy(l), kv, err_msg=f"layer {l} KV cache")
