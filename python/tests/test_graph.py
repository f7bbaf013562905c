"""The same bits from propose and verify called eagerly, replayed inside the caller's
torch.cuda.graph (the backend launches its kernels into the caller's capture instead
of replaying its own graph), and inside a torch.compile'd function (custom ops, no
graph break; on the CPU backend too)."""

import numpy as np
import pytest
import torch

import sparkdraft
from conftest import OPTS, require_cuda
from util import bits, context_inputs, propose_inputs


def verify_inputs(d, prop, seed, device):
    N, V = d.block_size, d.vocab_size
    R = prop["anchor_tokens"].shape[0]
    g = torch.Generator().manual_seed(seed)
    return dict(
        draft_tokens=prop["out_tokens"],
        anchor_positions=prop["anchor_positions"],
        seeds=prop["seeds"],
        temperatures=prop["temperatures"],
        cache_slots=prop["cache_slots"],
        draft_logits=prop["out_draft_logits"],
        target_logits=(3 * torch.randn((R, N + 1, V), generator=g)).to(torch.bfloat16).to(device),
        out_num_accepted=torch.full((R,), -1, dtype=torch.int32, device=device),
        out_tokens=torch.full((R, N + 1), -5, dtype=torch.int64, device=device),
    )


def setup(tiny, device, seed):
    d = sparkdraft.Draft(tiny, device, **OPTS)
    ctx, lengths = context_inputs(d, 6, seed, device)
    d.store_context(**ctx)
    prop = propose_inputs(d, lengths, seed, device, padding=(3,))
    ver = verify_inputs(d, prop, seed, device)
    return d, prop, ver


def reset(prop, ver):
    """The outputs back to the sentinels they started from (padding rows keep them)."""
    prop["out_tokens"].fill_(-7)
    prop["out_draft_logits"].zero_()
    ver["out_num_accepted"].fill_(-1)
    ver["out_tokens"].fill_(-5)


def snapshot(prop, ver):
    return [bits(prop["out_tokens"]), bits(prop["out_draft_logits"]),
            bits(ver["out_num_accepted"]), bits(ver["out_tokens"])]


def same(a, b, what):
    for x, y, name in zip(a, b, ["draft tokens", "draft logits", "num_accepted", "verified tokens"]):
        np.testing.assert_array_equal(x, y, err_msg=f"{what}: {name}")


def test_eager_equals_cuda_graph_replay(tiny):
    require_cuda()
    seed = 81
    d, prop, ver = setup(tiny, "cuda", seed)
    d.propose(**prop)
    d.verify(**ver)
    torch.cuda.synchronize()
    eager = snapshot(prop, ver)

    bound = d.bind(**{k: prop[k] for k in prop})
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the capture, as torch's docs advise
        d.propose(**prop)
        d.verify(**ver)
    torch.cuda.current_stream().wait_stream(side)
    # Without the GPU verifier (CudaDraft::verify_device) verify runs on the host and is
    # refused inside a capture: then only propose is captured, and verify runs after.
    gpu_verify = sparkdraft._core.HAVE_GPU_VERIFY
    if not gpu_verify:
        print("this build has no GPU verifier: verify runs eagerly after each replay")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        d.propose(**prop)  # the eager form: kernels straight into the capture
        if gpu_verify:
            d.verify(**ver)
    bgraph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(bgraph):
        bound.propose(6)  # the bound form: its own graph is bypassed while capturing
    for g in (graph, bgraph):
        reset(prop, ver)
        g.replay()
        if g is bgraph or not gpu_verify:
            d.verify(**ver)
        torch.cuda.synchronize()
        same(snapshot(prop, ver), eager, "graph replay" if g is graph else "bound-form graph replay")

    # New values in the same buffers: the replay reads them (seeds and temperatures).
    prop["seeds"].add_(12345)
    prop["temperatures"].fill_(1.0)
    d.propose(**prop)
    d.verify(**ver)
    torch.cuda.synchronize()
    eager2 = snapshot(prop, ver)
    reset(prop, ver)
    graph.replay()
    if not gpu_verify:
        d.verify(**ver)
    torch.cuda.synchronize()
    same(snapshot(prop, ver), eager2, "graph replay on new values")


def test_eager_equals_torch_compile(tiny, device):
    from sparkdraft import torch_ops  # noqa: F401  (registers sparkdraft::propose, ::verify)

    seed = 91
    d, prop, ver = setup(tiny, device, seed)
    d.propose(**prop)
    d.verify(**ver)
    if device == "cuda":
        torch.cuda.synchronize()
    eager = snapshot(prop, ver)
    reset(prop, ver)
    key = d._key

    def step(a, pos, seeds, temps, slots, tables, out_tokens, out_logits, target_logits,
             num_accepted, verified):
        torch.ops.sparkdraft.propose(key, a, pos, seeds, temps, slots, tables, out_tokens, out_logits)
        torch.ops.sparkdraft.verify(key, out_tokens, pos, seeds, temps, slots, out_logits,
                                    target_logits, num_accepted, verified)
        return num_accepted.sum() + 1

    compiled = torch.compile(step, fullgraph=True, backend="inductor" if device == "cuda" else "aot_eager")
    total = compiled(prop["anchor_tokens"], prop["anchor_positions"], prop["seeds"],
                     prop["temperatures"], prop["cache_slots"], prop["block_tables"],
                     prop["out_tokens"], prop["out_draft_logits"], ver["target_logits"],
                     ver["out_num_accepted"], ver["out_tokens"])
    if device == "cuda":
        torch.cuda.synchronize()
    same(snapshot(prop, ver), eager, "torch.compile")
    assert int(total) == int(ver["out_num_accepted"].sum()) + 1
