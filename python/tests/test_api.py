"""The Python API: checkpoints, drafts, zero-copy calls, the bind-once form, the KV
cache views and the caller's KV caches, and every refusal of the boundary."""

import gc

import numpy as np
import pytest
import torch

import sparkdraft
from conftest import OPTS, require_cuda
from util import bits, context_inputs, propose_inputs


def run(draft, ctx, prop):
    draft.store_context(**ctx)
    draft.propose(**prop)


def test_checkpoint_config_and_plan(tiny):
    c = tiny.config
    assert (c["hidden_size"], c["vocab_size"], c["block_size"]) == (64, 1000, 7)
    assert c["target_layer_ids"] == [1, 5, 9]
    parts = [p["part"] for p in tiny.plan]
    assert "markov loop" in parts and all(set(p) == {"part", "variant", "reason"} for p in tiny.plan)
    d = sparkdraft.Draft(tiny, "cpu", **OPTS)
    assert d.backend == "cpu" and d.options["max_reqs"] == 8 and d.plan == tiny.plan


def test_make_checkpoint_shapes_a_draft_for_a_target(tmp_path):
    ck = sparkdraft.make_checkpoint(
        tmp_path / "d", "tiny", vocab_size=40, target_hidden_size=24,
        target_layer_ids=[-1, 0, 2], block_size=3, seed=5,
    )
    c = ck.config
    assert (c["vocab_size"], c["mask_token_id"], c["target_hidden_size"]) == (40, 39, 24)
    assert (c["target_layer_ids"], c["block_size"]) == ([-1, 0, 2], 3)
    with pytest.raises(sparkdraft.ConfigError, match="target_layer_ids"):
        sparkdraft.make_checkpoint(tmp_path / "e", "tiny", target_layer_ids=[3, 1])
    with pytest.raises(sparkdraft.ConfigError, match="unknown config fields"):
        sparkdraft.make_checkpoint(tmp_path / "f", "tiny", vocabulary=3)
    with pytest.raises(sparkdraft.CheckpointError):
        sparkdraft.Checkpoint(tmp_path / "missing")


def test_numpy_and_torch_give_the_same_bits(tiny):
    """The CPU backend takes numpy arrays (bf16 as uint16 bits) and torch tensors alike."""
    ctx, lengths = context_inputs(sparkdraft.Draft(tiny, "cpu", **OPTS), 5, seed=11)
    a = sparkdraft.Draft(tiny, "cpu", **OPTS)
    prop_t = propose_inputs(a, lengths, seed=11)
    run(a, ctx, prop_t)
    b = sparkdraft.Draft(tiny, "cpu", **OPTS)
    ctx_np = {k: v.numpy() if v.dtype != torch.bfloat16 else v.view(torch.uint16).numpy()
              for k, v in ctx.items()}
    prop_np = {k: v.numpy().copy() if v.dtype != torch.bfloat16 else
               np.zeros(tuple(v.shape), dtype=np.uint16) for k, v in propose_inputs(b, lengths, seed=11).items()}
    run(b, ctx_np, prop_np)
    np.testing.assert_array_equal(bits(prop_t["out_tokens"]), prop_np["out_tokens"])
    np.testing.assert_array_equal(bits(prop_t["out_draft_logits"]).view(np.uint16),
                                  prop_np["out_draft_logits"])
    assert (prop_np["out_tokens"] >= 0).all()


def test_bind_once_equals_eager(tiny, device):
    seed = 21
    eager = sparkdraft.Draft(tiny, device, **OPTS)
    ctx, lengths = context_inputs(eager, 6, seed, device)
    prop = propose_inputs(eager, lengths, seed, device, padding=(2,))
    run(eager, ctx, prop)

    bound_draft = sparkdraft.Draft(tiny, device, **OPTS)
    ctx2 = {k: v.clone() for k, v in ctx.items()}
    prop2 = {k: v.clone() for k, v in propose_inputs(bound_draft, lengths, seed, device, padding=(2,)).items()}
    bound = bound_draft.bind(**prop2, **ctx2)
    assert bound.max_rows == 6 and bound.max_tokens == ctx["positions"].shape[0]
    bound.store_context(bound.max_tokens)
    for _ in range(3):  # the first call captures the backend's graph (CUDA), the rest replay it
        prop2["out_tokens"].fill_(-7)
        bound.propose(6)
        if device == "cuda":
            torch.cuda.synchronize()
        np.testing.assert_array_equal(bits(prop2["out_tokens"]), bits(prop["out_tokens"]))
        np.testing.assert_array_equal(bits(prop2["out_draft_logits"]), bits(prop["out_draft_logits"]))
    # The padding row's slot is -1: its tokens are whatever the backend leaves there, but
    # fewer rows use only the first rows.
    prop2["out_tokens"].fill_(-7)
    bound.propose(2)
    if device == "cuda":
        torch.cuda.synchronize()
    np.testing.assert_array_equal(bits(prop2["out_tokens"][:2]), bits(prop["out_tokens"][:2]))
    assert (bits(prop2["out_tokens"][2:]) == -7).all()
    with pytest.raises(sparkdraft.InvalidArgument, match=r"num_rows 7 is outside \[1, 6\]"):
        bound.propose(7)


def test_kv_cache_views_are_zero_copy(tiny, device):
    d = sparkdraft.Draft(tiny, device, **OPTS)
    views = [d.kv_cache(l) for l in range(tiny.config["num_layers"])]
    c = tiny.config
    assert tuple(views[0].shape) == (32 * 16, c["num_kv_heads"], 2 * c["head_dim"])
    assert views[0].dtype == torch.bfloat16 and views[0].device.type == device
    assert all((v == 0).all() for v in views)
    ctx, _ = context_inputs(d, 4, seed=31, device=device)
    d.store_context(**ctx)
    if device == "cuda":
        torch.cuda.synchronize()
    for l, v in enumerate(views):  # the views see the store without another call
        np.testing.assert_array_equal(bits(v).view(np.uint16), d.kv_cache_copy(l))
        assert (bits(v) != 0).any()
    del d
    gc.collect()
    assert (bits(views[0]) != 0).any()  # the view keeps the draft alive


def test_the_callers_kv_caches(tiny, device):
    """A draft on the caller's KV tensors drafts the same bits as one on its own, and the
    caller's tensors hold what the draft's own caches hold."""
    c, seed = tiny.config, 41
    shape = (OPTS["num_pages"] * OPTS["page_size"], c["num_kv_heads"], 2 * c["head_dim"])
    own = sparkdraft.Draft(tiny, device, **OPTS)
    ctx, lengths = context_inputs(own, 5, seed, device)
    prop = propose_inputs(own, lengths, seed, device)
    run(own, ctx, prop)
    mine = [torch.zeros(shape, dtype=torch.bfloat16, device=device) for _ in range(c["num_layers"])]
    ext = sparkdraft.Draft(tiny, device, kv_caches=mine, **OPTS)
    assert ext.kv_cache(1).data_ptr() == mine[1].data_ptr()
    prop2 = propose_inputs(ext, lengths, seed, device)
    run(ext, ctx, prop2)
    if device == "cuda":
        torch.cuda.synchronize()
    np.testing.assert_array_equal(bits(prop2["out_tokens"]), bits(prop["out_tokens"]))
    np.testing.assert_array_equal(bits(prop2["out_draft_logits"]), bits(prop["out_draft_logits"]))
    for l in range(c["num_layers"]):
        np.testing.assert_array_equal(bits(mine[l]).view(np.uint16), own.kv_cache_copy(l))
    del mine
    gc.collect()  # the draft keeps the caller's tensors alive
    run(ext, ctx, prop2)
    with pytest.raises(sparkdraft.InvalidArgument, match="one per layer"):
        sparkdraft.Draft(tiny, device, kv_caches=[torch.zeros(shape, dtype=torch.bfloat16)], **OPTS)
    bad = [torch.zeros(shape, dtype=torch.float32, device=device) for _ in range(c["num_layers"])]
    with pytest.raises(sparkdraft.DTypeError, match=r"kv_caches\[0\] must be bfloat16"):
        sparkdraft.Draft(tiny, device, kv_caches=bad, **OPTS)
    short = [torch.zeros((8,) + shape[1:], dtype=torch.bfloat16, device=device)] * c["num_layers"]
    with pytest.raises(sparkdraft.InvalidArgument, match=r"kv_caches\[0\] has shape \(8, 2, 32\)"):
        sparkdraft.Draft(tiny, device, kv_caches=short, **OPTS)


def test_bound_arrays_stay_alive(tiny, device):
    """bind keeps every array's owner alive: the caller may drop its references."""
    seed = 51
    ref = sparkdraft.Draft(tiny, device, **OPTS)
    ctx, lengths = context_inputs(ref, 3, seed, device)
    prop = propose_inputs(ref, lengths, seed, device)
    run(ref, ctx, prop)
    d = sparkdraft.Draft(tiny, device, **OPTS)
    d.store_context(**ctx)
    p = {k: v.clone() for k, v in propose_inputs(d, lengths, seed, device).items()}
    out = p["out_tokens"]
    bound = d.bind(**p)
    addr = out.data_ptr()
    del p
    gc.collect()
    for _ in range(50):  # reuse of freed memory would show here
        torch.zeros(out.numel(), dtype=torch.int64, device=device)
    bound.propose(3)
    if device == "cuda":
        torch.cuda.synchronize()
    assert out.data_ptr() == addr
    np.testing.assert_array_equal(bits(out), bits(prop["out_tokens"]))


def bad_calls(tiny, device):
    """(what, mutate, exception, message) for every refusal of propose's boundary."""
    V, N = 1000, 7
    other = "cuda" if device == "cpu" else "cpu"
    cases = [
        ("dtype", lambda p: p.update(anchor_tokens=p["anchor_tokens"].int()), sparkdraft.DTypeError,
         "propose: anchor_tokens must be int64, got int32"),
        ("dtype of an output", lambda p: p.update(out_draft_logits=p["out_draft_logits"].float()),
         TypeError, "propose: out_draft_logits must be bfloat16 (or uint16 holding bfloat16 bits), got float32"),
        ("shape", lambda p: p.update(block_tables=p["block_tables"][:, :3].contiguous()), ValueError,
         r"propose: block_tables has shape (4, 3), expected (4, 4)"),
        ("rows disagree", lambda p: p.update(seeds=p["seeds"][:3].contiguous()), ValueError,
         "propose: seeds has shape (3,), expected (4,)"),
        ("non-contiguous", lambda p: p.update(out_tokens=torch.empty((N, 4), dtype=torch.int64, device=device).t()),
         ValueError, "propose: out_tokens is not contiguous (strides (1, 4) elements for shape (4, 7))"),
        ("anchor token", lambda p: p["anchor_tokens"].__setitem__(1, V), sparkdraft.InvalidArgument,
         f"propose: row 1: anchor token {V} is outside [0, {V})"),
        ("negative token", lambda p: p["anchor_tokens"].__setitem__(0, -1), sparkdraft.InvalidArgument,
         f"propose: row 0: anchor token -1 is outside [0, {V})"),
        ("cache slot", lambda p: p["cache_slots"].__setitem__(2, 8), sparkdraft.InvalidArgument,
         "propose: row 2: cache slot 8 is outside [-1, 8)"),
        ("slot twice", lambda p: p["cache_slots"].__setitem__(1, int(p["cache_slots"][0])), sparkdraft.InvalidArgument,
         "is used by two rows"),
        ("T < 0", lambda p: p["temperatures"].__setitem__(0, -0.5), sparkdraft.InvalidArgument,
         "propose: row 0: temperature -0.500000 must be finite and >= 0"),
        ("T NaN", lambda p: p["temperatures"].__setitem__(3, float("nan")), sparkdraft.InvalidArgument,
         "propose: row 3: temperature nan must be finite and >= 0"),
        ("page", lambda p: p["block_tables"].__setitem__((0, 0), 32), sparkdraft.InvalidArgument,
         "propose: row 0: block table entry 0 = 32 is outside [0, 32)"),
        ("negative position", lambda p: p["anchor_positions"].__setitem__(2, -3), sparkdraft.InvalidArgument,
         "propose: row 2: anchor position -3 is negative"),
        ("no rows", lambda p: p.update({k: v[:0] for k, v in p.items() if k != "out_draft_logits"}),
         sparkdraft.InvalidArgument, "propose: rows 0 is outside [1, max_reqs = "),
        ("position", lambda p: p["anchor_positions"].__setitem__(0, 60), sparkdraft.InvalidArgument,
         "propose: row 0: anchor position 60 + block 7 exceeds the 64 positions (the block table's max_pages_per_req x page_size)"),
    ]
    if device == "cuda" or sparkdraft.cuda_available():
        cases.append(("device", lambda p: p.update(seeds=p["seeds"].to(other)), sparkdraft.InvalidArgument,
                      f"propose: seeds is on {'cpu' if other == 'cpu' else 'cuda:0'}; the draft runs on "
                      f"{'cuda:0' if device == 'cuda' else 'cpu'}"))
    return cases


def test_every_bad_input_is_refused_and_nothing_is_written(tiny, device):
    d = sparkdraft.Draft(tiny, device, **OPTS)
    ctx, lengths = context_inputs(d, 4, seed=61, device=device)
    d.store_context(**ctx)
    for what, mutate, exc, message in bad_calls(tiny, device):
        p = propose_inputs(d, lengths, 61, device)
        p["out_draft_logits"].fill_(1.5)
        mutate(p)
        tokens_before = bits(p["out_tokens"])
        logits_before = bits(p["out_draft_logits"])
        with pytest.raises(exc) as e:
            d.propose(**p)
        assert message in str(e.value), f"{what}: {e.value}"
        assert isinstance(e.value, sparkdraft.Error), what
        np.testing.assert_array_equal(bits(p["out_tokens"]), tokens_before, err_msg=what)
        np.testing.assert_array_equal(bits(p["out_draft_logits"]), logits_before, err_msg=what)
    # store_context's refusals.
    kv_before = [d.kv_cache_copy(l) for l in range(2)]
    bad_ctx = [
        (dict(positions=ctx["positions"].clone().fill_(64)), "store_context: token 0 position 64 is outside [0, 64)"),
        (dict(slots=ctx["slots"].clone().fill_(3)), "store_context: tokens 0 and 1 both write KV slot 3"),
        (dict(slots=ctx["slots"].clone().fill_(512)), "store_context: token 0 slot 512 is outside [-1, 512)"),
        (dict(hidden=ctx["hidden"][:, :100].contiguous()), "store_context: hidden has shape"),
        (dict(hidden=ctx["hidden"].float()), "store_context: hidden must be bfloat16"),
    ]
    for change, message in bad_ctx:
        with pytest.raises(sparkdraft.InvalidArgument) as e:
            d.store_context(**{**ctx, **change})
        assert message in str(e.value), str(e.value)
    for l in range(2):
        np.testing.assert_array_equal(d.kv_cache_copy(l), kv_before[l])
    # verify's refusals (after a real propose: the drafts are in range).
    p = propose_inputs(d, lengths, 61, device)
    d.propose(**p)
    R, N, V = 4, 7, 1000
    good = dict(draft_tokens=p["out_tokens"], anchor_positions=p["anchor_positions"], seeds=p["seeds"],
                temperatures=p["temperatures"], cache_slots=p["cache_slots"],
                draft_logits=p["out_draft_logits"],
                target_logits=torch.zeros((R, N + 1, V), dtype=torch.float32, device=device),
                out_num_accepted=torch.full((R,), -9, dtype=torch.int32, device=device),
                out_tokens=torch.full((R, N + 1), -9, dtype=torch.int64, device=device))
    drafts = p["out_tokens"].clone()
    drafts[0, 2] = V
    bad_verify = [
        (dict(draft_tokens=drafts), sparkdraft.InvalidArgument, "verify: row 0: draft token 2 = 1000 is outside [0, 1000)"),
        (dict(top_p=torch.tensor([1.0, 0.0, 1.0, 1.0], device=device)), sparkdraft.InvalidArgument,
         "verify: row 1: top_p 0.000000 must be in (0, 1] (1 = off)"),
        (dict(top_k=torch.tensor([0, 0, -1, 0], dtype=torch.int32, device=device)), sparkdraft.InvalidArgument,
         "verify: row 2: top_k -1 must be >= 0 (0 = off)"),
        (dict(target_logits=good["target_logits"].half()), TypeError,
         "verify: target_logits must be bfloat16 or float32, got float16"),
        (dict(out_tokens=good["out_tokens"][:, :N].contiguous()), ValueError,
         "verify: out_tokens has shape (4, 7), expected (4, 8)"),
        (dict(method="greedy"), sparkdraft.InvalidArgument, "verify: method 'greedy'"),
    ]
    for change, exc, message in bad_verify:
        with pytest.raises(exc) as e:
            d.verify(**{**good, **change})
        assert message in str(e.value), str(e.value)
        assert (bits(good["out_tokens"]) == -9).all() and (bits(good["out_num_accepted"]) == -9).all()
    d.verify(**good)
    k = bits(good["out_num_accepted"])
    assert ((k >= 0) & (k <= N)).all(), k
    # Options.
    with pytest.raises(sparkdraft.InvalidArgument, match="max_reqs 0 must be >= 1"):
        sparkdraft.Draft(tiny, device, **{**OPTS, "max_reqs": 0})
    with pytest.raises(sparkdraft.InvalidArgument, match="device 'tpu'"):
        sparkdraft.Draft(tiny, "tpu")
    with pytest.raises(TypeError):
        d.propose(*[None] * 8)


def test_cuda_backend_refused_without_cuda(tiny):
    if sparkdraft.cuda_available():
        pytest.skip("a GPU is here: the refusal applies where there is none")
    with pytest.raises(sparkdraft.Unavailable):
        sparkdraft.Draft(tiny, "cuda:0", **OPTS)


def test_cuda_backend_equals_cpu_backend(tiny):
    """The contract's invariance, seen from Python: the same tokens, cache and KV bits."""
    require_cuda()
    seed = 71
    cpu = sparkdraft.Draft(tiny, "cpu", **OPTS)
    ctx, lengths = context_inputs(cpu, 7, seed)
    prop = propose_inputs(cpu, lengths, seed, padding=(4,))
    run(cpu, ctx, prop)
    gpu = sparkdraft.Draft(tiny, "cuda", **OPTS)
    prop_g = propose_inputs(gpu, lengths, seed, "cuda", padding=(4,))
    run(gpu, {k: v.cuda() for k, v in ctx.items()}, prop_g)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(bits(prop_g["out_tokens"]), bits(prop["out_tokens"]))
    np.testing.assert_array_equal(bits(prop_g["out_draft_logits"]), bits(prop["out_draft_logits"]))
    for l in range(2):
        np.testing.assert_array_equal(gpu.kv_cache_copy(l), cpu.kv_cache_copy(l))
