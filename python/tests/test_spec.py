"""Speculative decoding end to end over a transformers target (Qwen3ForCausalLM, seeded
random weights, nothing downloaded): greedy equals the target's own greedy generate(),
and sampling leaves the target's distribution unchanged (chi-square); with the confidence
head and a schedule (adaptive draft length) greedy still equals generate() while fewer drafts
are verified; the steps-per-second table is profiled from the target."""

import math

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

import sparkdraft  # noqa: E402
from sparkdraft.spec import SpecDecoder, make_draft_checkpoint_for, make_target  # noqa: E402


@pytest.fixture(scope="module")
def target_cpu():
    # A small vocabulary: the random draft's greedy token then matches the target's now
    # and then, so both the accept and the reject paths run.
    return make_target(vocab_size=8, seed=0)


def decoder(target, tmp_path, device, rows, pages_per_row=4, method="standard", **overrides):
    ck = make_draft_checkpoint_for(target, tmp_path / "draft", block_size=4, seed=2, **overrides)
    draft = sparkdraft.Draft(ck, device, max_reqs=rows, cache_slots=rows, page_size=16,
                             max_pages_per_req=pages_per_row, num_pages=rows * pages_per_row)
    return SpecDecoder(target, draft, method=method)


@pytest.mark.parametrize("method", ["standard", "block"])
def test_greedy_equals_the_targets_generate(target_cpu, tmp_path, device, method):
    target = target_cpu.to(device)
    g = torch.Generator().manual_seed(5)
    prompts = [torch.randint(0, 8, (n,), generator=g).tolist() for n in (1, 3, 8, 13)]
    lengths = [24, 9, 16, 5]
    spec = decoder(target, tmp_path, device, rows=4, method=method)
    got = spec.generate(prompts, max(lengths), temperature=0.0)
    for i, (p, n) in enumerate(zip(prompts, lengths)):
        x = torch.tensor([p], device=device)
        # The attention mask given: generate() would otherwise mask the prompt's pad-id tokens.
        ref = target.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=n,
                              do_sample=False, output_scores=True, return_dict_in_generate=True)
        want = ref.sequences[0, len(p):].tolist()
        # How close the target came to a tie at each step (fp32 block vs incremental
        # forwards differ in the last bits; a margin far above that makes equality a
        # fair demand, and a failure names the margin where it happened).
        margins = [float(s[0].topk(2).values[0] - s[0].topk(2).values[1]) for s in ref.scores]
        assert min(margins) > 1e-4, f"prompt {i}: a near tie ({min(margins):.2e}): choose another seed"
        first = next((j for j in range(n) if got[i][j] != want[j]), None)
        assert first is None, (
            f"prompt {i} ({method}): token {first} is {got[i][first]}, generate() gave {want[first]} "
            f"(margin there {margins[first]:.3e}); spec {got[i][:n]} vs {want}"
        )
    st = spec.stats
    assert st.tokens == 4 * max(lengths) and st.rounds >= 1
    print(st.summary())
    assert st.accepted[0] > 0, "no draft was ever accepted: only the reject path ran"
    target.to("cpu")


def chi_square(counts, probs):
    """Pearson's statistic with bins of expected count < 5 merged; (stat, df)."""
    total = counts.sum()
    exp = probs * total
    order = np.argsort(exp)
    merged_o, merged_e, acc_o, acc_e = [], [], 0.0, 0.0
    for i in order:
        acc_o += counts[i]
        acc_e += exp[i]
        if acc_e >= 5:
            merged_o.append(acc_o)
            merged_e.append(acc_e)
            acc_o = acc_e = 0.0
    if acc_e > 0:
        if merged_e:
            merged_o[-1] += acc_o
            merged_e[-1] += acc_e
        else:
            merged_o.append(acc_o)
            merged_e.append(acc_e)
    o, e = np.array(merged_o), np.array(merged_e)
    return float(((o - e) ** 2 / e).sum()), len(o) - 1


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sampling_keeps_the_targets_distribution(tmp_path, device, temperature):
    """The token at a fixed position (the second generated: drafted and verified, or
    emitted after a rejection) over many seeds follows the target's own sampling law
    there: sum over the first token t of p(t) p(x | t), computed from full forwards."""
    V, rows, batches = 16, 200, 5
    target = make_target(vocab_size=V, seed=1, initializer_range=0.15).to(device)
    prompt = [3, 1, 4, 1, 5]
    spec = decoder(target, tmp_path, device, rows=rows, pages_per_row=1)
    samples = []
    for b in range(batches):
        seeds = [1_000_003 * b + r for r in range(rows)]
        out = spec.generate([prompt] * rows, 2, temperature=temperature, seeds=seeds)
        samples += [o[1] for o in out]
    with torch.no_grad():
        x = torch.tensor([prompt], device=device)
        p1 = torch.softmax(target(x).logits[0, -1].double() / temperature, -1)
        both = torch.cat([x.repeat(V, 1), torch.arange(V, device=device).unsqueeze(1)], dim=1)
        p2 = torch.softmax(target(both).logits[:, -1].double() / temperature, -1)
        law = (p1.unsqueeze(1) * p2).sum(0).cpu().numpy()
    counts = np.bincount(samples, minlength=V).astype(np.float64)
    stat, df = chi_square(counts, law)
    threshold = df + 10 * math.sqrt(2 * df)
    print(f"T {temperature}: chi-square {stat:.1f} on {df} df (threshold {threshold:.1f}); "
          f"{len(samples)} samples; {spec.stats.summary()}")
    assert stat < threshold, f"chi-square {stat:.1f} >= {threshold:.1f} on {df} df: {counts} vs {law * len(samples)}"
    # The samples must not all come from one path: some drafts were accepted, some not.
    acc = spec.stats.acceptance_by_position()[0]
    assert 0.0 < acc < 1.0, f"acceptance of the first draft {acc}"


def test_scheduled_lengths_keep_greedy_exact_and_verify_fewer_drafts(target_cpu, tmp_path, device):
    """Adaptive draft length (contract.md section 9): a draft with the confidence head, a
    threshold schedule and the survival scheduler over a profiled sps table. Greedy stays the
    target's greedy generate() (the verifier is lossless at any length) and the threshold run
    verifies fewer drafts than the N-a-row run."""
    from sparkdraft import schedule

    target = target_cpu.to(device)
    g = torch.Generator().manual_seed(9)
    prompts = [torch.randint(0, 8, (n,), generator=g).tolist() for n in (2, 5, 9)]
    n_new = 14
    head = dict(enable_confidence_head=True, confidence_head_with_markov=True)
    want = []
    for p in prompts:
        x = torch.tensor([p], device=device)
        ref = target.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=n_new, do_sample=False)
        want.append(ref[0, len(p):].tolist())
    full = decoder(target, tmp_path / "full", device, rows=3, **head)
    assert full.generate(prompts, n_new) == want
    cut = decoder(target, tmp_path / "cut", device, rows=3, **head)
    # A threshold at each round's median confidence: about half the drafts are cut.
    def median_cut(c):
        live = c.cpu().numpy()
        return schedule.threshold_lengths(c, float(np.median(live[live > 0])))

    got = cut.generate(prompts, n_new, schedule=median_cut)
    assert got == want
    assert cut.stats.verified_drafts < full.stats.verified_drafts, (cut.stats.verified_drafts, full.stats.verified_drafts)
    sps = cut.profile_sps(repeats=2)
    assert len(sps) == 3 * 5 + 1 and all(x > 0 for x in sps)
    surv = decoder(target, tmp_path / "surv", device, rows=3, **head)
    got = surv.generate(prompts, n_new, schedule=lambda c: schedule.survival_greedy_lengths(c, sps))
    assert got == want
    plain = decoder(target, tmp_path / "plain", device, rows=3)
    with pytest.raises(sparkdraft.InvalidArgument, match="confidence head"):
        plain.generate(prompts, 2, schedule=lambda c: schedule.threshold_lengths(c, 0.5))
    with pytest.raises(sparkdraft.InvalidArgument, match="lengths"):
        surv.generate(prompts, 2, schedule=lambda c: np.full(3, 99))
    for n_bad in (-1, 2.5, True):
        with pytest.raises(sparkdraft.InvalidArgument, match="max_new_tokens"):
            plain.generate(prompts, n_bad)
    with pytest.raises(sparkdraft.InvalidArgument, match="2 seeds for 3 prompts"):
        plain.generate(prompts, 2, seeds=[1, 2])
    rounds = plain.stats.rounds
    assert plain.generate(prompts, 0) == [[], [], []] and plain.stats.rounds == rounds
    target.to("cpu")
