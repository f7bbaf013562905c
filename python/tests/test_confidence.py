"""The confidence head from Python (contract.md section 9): propose writes one float32
value per drafted position into ``out_confidences``, in [0, 1], +0 on padding rows, the
same bits on the CPU and the GPU; a draft without the head refuses the output."""

import numpy as np
import pytest
import torch

import sparkdraft
from conftest import OPTS, require_cuda
import util
from util import bits, context_inputs, propose_inputs


@pytest.fixture(scope="module")
def tiny_conf(tmp_path_factory):
    """The tiny preset with the confidence head on [h ; w1[prev]], seed 3."""
    return sparkdraft.make_checkpoint(tmp_path_factory.mktemp("tiny_conf"), "tiny-conf", seed=3)


def drafted(ckpt, device, seed=21, rows=5, padding=(1,)):
    conf = torch.full((rows, ckpt.config["block_size"]), -1.0, dtype=torch.float32, device=device)
    return util.drafted(ckpt, device, seed, rows, padding, OPTS, out_confidences=conf)[1]


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


def test_schedulers_from_python(tiny_conf):
    from sparkdraft import schedule

    c = np.array([[0.9, 0.5], [0.8, 0.1]], dtype=np.float32)
    np.testing.assert_array_equal(schedule.threshold_lengths(c, 0.5), [2, 1])
    np.testing.assert_array_equal(schedule.threshold_lengths(torch.from_numpy(c), 0.85), [1, 0])
    # theta_K = tau_K * sps[2 + K]: 2, 2.32, 2.22: Algorithm 1 stops after one draft.
    np.testing.assert_array_equal(
        schedule.survival_greedy_lengths(c, [1, 1, 1.0, 0.8, 0.6, 0.6, 0.6]), [1, 0])
    assert schedule.survival_capacity(c, [1, 1, 1.0, 0.6, 0.6, 0.6, 0.6]) == 4
    np.testing.assert_array_equal(schedule.survival_admit(c, 3), [2, 1])
    lagged = schedule.LaggedSurvivalScheduler([1.0] * 9, 1)
    np.testing.assert_array_equal(lagged.schedule(c), [1, 0])
    assert lagged.step == 1 and lagged.last_capacity == 1
    with pytest.raises(sparkdraft.DTypeError):
        schedule.threshold_lengths(c.astype(np.float64), 0.5)
    with pytest.raises(sparkdraft.InvalidArgument, match="threshold"):
        schedule.threshold_lengths(c, 1.5)
    # The scheduler on a real draft's output: lengths within [0, N], padding rows 0.
    prop = drafted(tiny_conf, "cpu")
    n = schedule.threshold_lengths(prop["out_confidences"], 0.5)
    assert n.shape == (5,) and n[1] == 0
    assert np.all((n >= 0) & (n <= tiny_conf.config["block_size"]))


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_scheduled_lengths_feed_the_verifier(tiny_conf, device):
    """The adaptive length end to end: the confidences, the threshold's lengths, the
    verifier over those lengths only (k <= lengths[r], -1 after the emitted token); the
    same call without lengths is the call with lengths N; a length outside [0, N] is
    refused."""
    if device == "cuda":
        require_cuda()
    from sparkdraft import schedule

    N, V = tiny_conf.config["block_size"], tiny_conf.config["vocab_size"]
    d = sparkdraft.Draft(tiny_conf, device, **OPTS)
    ctx, ctx_lengths = context_inputs(d, 5, 31, device)
    prop = propose_inputs(d, ctx_lengths, 31, device, padding=(1,))
    prop["out_confidences"] = torch.full((5, N), -1.0, dtype=torch.float32, device=device)
    d.store_context(**ctx)
    d.propose(**prop)
    n = schedule.threshold_lengths(prop["out_confidences"], 0.5)
    n[0], n[2] = 0, N  # every length appears: 0, N and the scheduler's
    gen = torch.Generator().manual_seed(5)
    target = torch.randn((5, N + 1, V), generator=gen).to(device)

    def run(lengths):
        out = dict(out_num_accepted=torch.full((5,), -9, dtype=torch.int32, device=device),
                   out_tokens=torch.full((5, N + 1), -9, dtype=torch.int64, device=device))
        d.verify(prop["out_tokens"], prop["anchor_positions"], prop["seeds"], prop["temperatures"],
                 prop["cache_slots"], prop["out_draft_logits"], target, out["out_num_accepted"],
                 out["out_tokens"], lengths=lengths)
        return bits(out["out_num_accepted"]), bits(out["out_tokens"])

    k, tokens = run(torch.from_numpy(n.astype(np.int32)).to(device))
    for r in (0, 2, 3, 4):  # row 1 is padding
        assert 0 <= k[r] <= n[r], (r, k[r], n[r])
        assert (tokens[r, k[r] + 1:] == -1).all() and 0 <= tokens[r, k[r]] < V
    k_full, tokens_full = run(torch.full((5,), N, dtype=torch.int32, device=device))
    k_none, tokens_none = run(None)
    np.testing.assert_array_equal(k_full, k_none)
    np.testing.assert_array_equal(tokens_full, tokens_none)
    bad = torch.tensor([0, 0, N + 1, 0, 0], dtype=torch.int32, device=device)
    with pytest.raises(sparkdraft.InvalidArgument, match=f"row 2: length {N + 1} is outside"):
        run(bad)



def test_calibration_changes_only_the_confidences(tmp_path):
    """Per-position calibration (STS, contract.md 9.1): sigmoid(z / T_j). T_j = 1 gives the plain
    head's bits; T_j = 2 keeps the tokens and pulls every value towards 1/2; CPU == CUDA."""
    n = 7
    plain = sparkdraft.make_checkpoint(tmp_path / "plain", "tiny-conf", seed=3)
    ones = sparkdraft.make_checkpoint(tmp_path / "ones", "tiny-conf", seed=3, confidence_temperatures=[1.0] * n)
    twos = sparkdraft.make_checkpoint(tmp_path / "twos", "tiny-conf", seed=3, confidence_temperatures=[2.0] * n)
    assert twos.config["confidence_temperatures"] == [2.0] * n
    a, b, c = (drafted(ck, "cpu") for ck in (plain, ones, twos))
    np.testing.assert_array_equal(bits(b["out_confidences"]), bits(a["out_confidences"]))
    np.testing.assert_array_equal(a["out_tokens"].numpy(), c["out_tokens"].numpy())
    x, y = a["out_confidences"].numpy()[0], c["out_confidences"].numpy()[0]
    assert np.all(np.abs(y - 0.5) <= np.abs(x - 0.5)) and np.any(y != x)
    with pytest.raises(sparkdraft.ConfigError, match="confidence_temperatures"):
        sparkdraft.make_checkpoint(tmp_path / "bad", "tiny-conf", seed=3, confidence_temperatures=[1.0] * (n - 1))


def test_calibrated_confidences_cpu_and_cuda_agree(tmp_path):
    require_cuda()
    twos = sparkdraft.make_checkpoint(tmp_path / "twos", "tiny-conf", seed=3, confidence_temperatures=[2.0, 0.5, 1.0, 3.0, 1.5, 0.7, 2.5])
    np.testing.assert_array_equal(bits(drafted(twos, "cuda")["out_confidences"]), bits(drafted(twos, "cpu")["out_confidences"]))


def test_profile_sps_times_each_batch_size():
    """schedule.profile_sps: one median time per batch size b (a step of b * 2 ms here),
    sps[b] = 1 / seconds, sps[0] = sps[1]; bad arguments are refused."""
    import time as _time

    from sparkdraft import schedule

    calls = []

    def step(b):
        calls.append(b)
        _time.sleep(0.002 * b)

    sps = schedule.profile_sps(step, 6, repeats=3, warmup=1)
    assert len(sps) == 7 and sps[0] == sps[1]
    assert calls.count(4) == 4  # one warm-up and three timed calls
    assert sps[1] > sps[3] > sps[6] > 0
    assert 1.0 / sps[6] >= 0.012
    with pytest.raises(sparkdraft.InvalidArgument, match="max_tokens"):
        schedule.profile_sps(step, 0)
