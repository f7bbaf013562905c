"""torch.library custom ops over a Draft, so that torch.compile'd code calls sparkdraft
without a graph break (docs/python.md, "torch.compile").

``sparkdraft::propose`` and ``sparkdraft::verify`` take the draft's ``key`` (an int:
``draft._key``) and the same arrays as Draft.propose / Draft.verify; they write their
outputs in place (declared in ``mutates_args``) and run on torch's current stream.
Their fake implementations do nothing (the outputs exist already), so tracing sees an
opaque op with known effects.
"""

from __future__ import annotations

from typing import Optional

import torch

from . import _draft_of


@torch.library.custom_op("sparkdraft::propose", mutates_args=("out_tokens", "out_draft_logits"))
def propose(
    draft: int,
    anchor_tokens: torch.Tensor,
    anchor_positions: torch.Tensor,
    seeds: torch.Tensor,
    temperatures: torch.Tensor,
    cache_slots: torch.Tensor,
    block_tables: torch.Tensor,
    out_tokens: torch.Tensor,
    out_draft_logits: torch.Tensor,
    lengths: Optional[torch.Tensor] = None,
) -> None:
    _draft_of(draft).propose(
        anchor_tokens,
        anchor_positions,
        seeds,
        temperatures,
        cache_slots,
        block_tables,
        out_tokens,
        out_draft_logits,
        stream=None,
        lengths=lengths,
    )


@propose.register_fake
def _propose_fake(draft, anchor_tokens, anchor_positions, seeds, temperatures, cache_slots,
                  block_tables, out_tokens, out_draft_logits, lengths=None) -> None:
    return None


@torch.library.custom_op("sparkdraft::verify", mutates_args=("out_num_accepted", "out_tokens"))
def verify(
    draft: int,
    draft_tokens: torch.Tensor,
    anchor_positions: torch.Tensor,
    seeds: torch.Tensor,
    temperatures: torch.Tensor,
    cache_slots: torch.Tensor,
    draft_logits: torch.Tensor,
    target_logits: torch.Tensor,
    out_num_accepted: torch.Tensor,
    out_tokens: torch.Tensor,
    top_k: Optional[torch.Tensor] = None,
    top_p: Optional[torch.Tensor] = None,
    lengths: Optional[torch.Tensor] = None,
    method: str = "standard",
) -> None:
    _draft_of(draft).verify(
        draft_tokens,
        anchor_positions,
        seeds,
        temperatures,
        cache_slots,
        draft_logits,
        target_logits,
        out_num_accepted,
        out_tokens,
        top_k=top_k,
        top_p=top_p,
        lengths=lengths,
        method=method,
        stream=None,
    )


@verify.register_fake
def _verify_fake(draft, draft_tokens, anchor_positions, seeds, temperatures, cache_slots,
                 draft_logits, target_logits, out_num_accepted, out_tokens, top_k=None,
                 top_p=None, lengths=None, method="standard") -> None:
    return None
