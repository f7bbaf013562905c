"""Seeded inputs for store_context and propose (torch tensors on a device)."""

import numpy as np
import torch


def bits(t):
    """The bit pattern of a tensor or array as a numpy integer array (bf16/f32 exact)."""
    if isinstance(t, np.ndarray):
        return t.copy()
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    elif t.dtype == torch.float32:
        t = t.view(torch.int32)
    return t.numpy().copy()


def context_inputs(draft, rows, seed, device="cpu"):
    """Every row's context 0 .. L_r-1 (L_r in [5, 40)), pages r*P .. r*P+P-1."""
    cfg, o = draft.config, draft.options
    ps, P = o["page_size"], o["max_pages_per_req"]
    W = len(cfg["target_layer_ids"]) * cfg["target_hidden_size"]
    rng = np.random.default_rng(seed)
    lengths = rng.integers(5, 40, size=rows)
    pos, slots = [], []
    for r in range(rows):
        p = np.arange(lengths[r], dtype=np.int64)
        pos.append(p)
        slots.append((r * P + p // ps) * ps + p % ps)
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn((int(lengths.sum()), W), generator=g).to(torch.bfloat16)
    return (
        dict(
            hidden=hidden.to(device),
            positions=torch.from_numpy(np.concatenate(pos)).to(device),
            slots=torch.from_numpy(np.concatenate(slots)).to(device),
        ),
        lengths,
    )


def propose_inputs(draft, lengths, seed, device="cpu", padding=()):
    """Row r anchors at position lengths[r]; temperatures 0, 0.7, 1, ...; cache slots
    a seeded permutation; rows in `padding` are padding rows (slot -1)."""
    cfg, o = draft.config, draft.options
    N, V, P = cfg["block_size"], cfg["vocab_size"], o["max_pages_per_req"]
    R = len(lengths)
    rng = np.random.default_rng(seed + 1000)
    slots = rng.permutation(o["cache_slots"])[:R].astype(np.int64)
    for r in padding:
        slots[r] = -1
    temps = np.array([(0.0, 0.7, 1.0)[r % 3] for r in range(R)], dtype=np.float32)
    t = lambda a: torch.from_numpy(np.array(a, copy=True)).to(device)  # noqa: E731  (own memory)
    return dict(
        anchor_tokens=t(rng.integers(0, V, size=R).astype(np.int64)),
        anchor_positions=t(np.asarray(lengths, dtype=np.int64)),
        seeds=t(rng.integers(0, 2**40, size=R).astype(np.int64)),
        temperatures=t(temps),
        cache_slots=t(slots),
        block_tables=t((np.arange(R * P, dtype=np.int32).reshape(R, P))),
        out_tokens=torch.full((R, N), -7, dtype=torch.int64, device=device),
        out_draft_logits=torch.zeros((o["cache_slots"], N, V), dtype=torch.bfloat16, device=device),
    )


def drafted(ckpt, device, seed, rows, padding, options, **outputs):
    """One store_context + propose of `rows` seeded rows on a new Draft (rows in `padding`
    are padding rows); `outputs` adds output tensors (e.g. out_confidences) to the call.
    Returns the draft and the call's arguments, outputs filled."""
    import sparkdraft

    d = sparkdraft.Draft(ckpt, device, **options)
    ctx, lengths = context_inputs(d, rows, seed, device)
    prop = propose_inputs(d, lengths, seed, device, padding=padding)
    prop.update(outputs)
    d.store_context(**ctx)
    d.propose(**prop)
    return d, prop
