"""SpecDecoder: speculative decoding end to end, a small loop (not an engine).

A Hugging Face ``transformers`` causal LM is the target; a sparkdraft Draft proposes,
the target scores each row's block in one forward, the lossless verifier accepts, and
the accepted tokens become context (docs/python.md, "Speculative decoding").

Per row and round, with the anchor (the last token the target emitted, not yet run
through it) at position a:

1. the draft proposes N tokens for positions a+1 .. a+N;
2. the target scores the block in one forward: the row's tokens so far and the drafts
   (positions 0 .. a+N; rows of one length batched together). This loop keeps no KV
   cache for the target (a small loop, not an engine): each forward recomputes the
   prefix, and only its rows a .. a+N are used, N+1 rows of logits and hidden states;
3. the verifier accepts k drafts and emits one token: the row gains k+1 tokens;
4. the target's hidden states of positions a .. a+k (the anchor and the accepted
   drafts) go to the draft's store_context, and the emitted token at a+k+1 is the
   next anchor.

The prompt's last token is the first anchor; its other tokens are the first context.
Tap i of the draft's target_layer_ids is the output of the target's decoder layer i
(``hidden_states[i + 1]`` in transformers' terms; -1 the embeddings).
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Sequence

import numpy as np
import torch

from . import Draft, InvalidArgument
from .schedule import profile_sps as _profile_sps


@dataclass
class SpecStats:
    rounds: int = 0
    tokens: int = 0  # tokens emitted
    seconds: float = 0.0  # the whole loop
    draft_seconds: float = 0.0  # store_context + propose
    target_seconds: float = 0.0  # the target's forwards (prefill included)
    verify_seconds: float = 0.0
    # accepted[j]: rounds (over rows) whose draft j (0-based) was accepted.
    accepted: List[int] = field(default_factory=list)
    row_rounds: int = 0  # (row, round) pairs verified
    verified_drafts: int = 0  # drafts handed to the verifier (N a row without a schedule)

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def mean_accepted(self) -> float:
        """Mean accepted drafts per (row, round); each round also emits one more token."""
        return sum(self.accepted) / self.row_rounds if self.row_rounds else 0.0

    def acceptance_by_position(self) -> List[float]:
        """The share of (row, round)s whose draft at position j was accepted."""
        return [a / self.row_rounds if self.row_rounds else 0.0 for a in self.accepted]

    @property
    def draft_share(self) -> float:
        return self.draft_seconds / self.seconds if self.seconds > 0 else 0.0

    def summary(self) -> str:
        pos = " ".join(f"{x:.2f}" for x in self.acceptance_by_position())
        return (
            f"{self.tokens} tokens in {self.seconds:.3f} s ({self.tokens_per_second:.1f} tokens/s), "
            f"{self.rounds} rounds; mean accepted length {self.mean_accepted:.2f} drafts + 1 "
            f"per round; accepted by position [{pos}]; time: draft {100 * self.draft_share:.1f}%, "
            f"target {100 * self.target_seconds / max(self.seconds, 1e-12):.1f}%, "
            f"verify {100 * self.verify_seconds / max(self.seconds, 1e-12):.1f}%"
        )


def _by_length(rows, key):
    """Rows grouped by key (insertion order), for batched target forwards."""
    groups = {}
    for r in rows:
        groups.setdefault(key(r), []).append(r)
    return list(groups.values())


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class _Row:
    def __init__(self, index: int, prompt: Sequence[int], seed: int, temperature: float):
        self.index = index
        self.prompt = list(prompt)
        self.seed = seed
        self.temperature = temperature
        self.out: List[int] = []
        self.anchor = self.prompt[-1]
        self.a = len(self.prompt) - 1
        self.done = False


class SpecDecoder:
    """Speculative decoding of a transformers target with a sparkdraft draft.

    ``target``: a causal LM whose forward takes ``input_ids``, ``position_ids``,
    ``past_key_values`` and ``output_hidden_states`` (e.g. Qwen3ForCausalLM), on the
    draft's device, vocabulary equal to the draft's. ``draft``: a Draft whose config
    taps the target's layers (target_hidden_size = the target's hidden size).
    ``method``: the verifier's "standard" or "block".
    """

    def __init__(self, target, draft: Draft, *, method: str = "standard"):
        self.target = target
        self.draft = draft
        self.method = method
        cfg = draft.config
        self.N = cfg["block_size"]
        self.V = cfg["vocab_size"]
        self.taps = list(cfg["target_layer_ids"])
        tcfg = target.config
        if getattr(tcfg, "vocab_size", self.V) != self.V:
            raise InvalidArgument(
                f"SpecDecoder: the target's vocabulary ({tcfg.vocab_size}) is not the draft's ({self.V})"
            )
        if getattr(tcfg, "hidden_size", cfg["target_hidden_size"]) != cfg["target_hidden_size"]:
            raise InvalidArgument(
                f"SpecDecoder: the target's hidden size ({tcfg.hidden_size}) is not the draft's "
                f"target_hidden_size ({cfg['target_hidden_size']})"
            )
        layers = getattr(tcfg, "num_hidden_layers", None)
        if layers is not None and max(self.taps) >= layers:
            raise InvalidArgument(f"SpecDecoder: taps {self.taps} beyond the target's {layers} layers")
        self.device = torch.device(draft.device)
        o = draft.options
        self.page_size = o["page_size"]
        self.pages_per_req = o["max_pages_per_req"]
        self.max_rows = min(o["max_reqs"], o["cache_slots"], o["num_pages"] // self.pages_per_req)
        if self.max_rows < 1:
            raise InvalidArgument(
                "SpecDecoder: the draft's num_pages must hold max_pages_per_req pages for a row"
            )
        self.stats = SpecStats(accepted=[0] * self.N)
        dev = self.device
        R, N, V, P = self.max_rows, self.N, self.V, self.pages_per_req
        # The persistent buffers of every round (rows that are done are padding rows).
        self.out_tokens = torch.zeros((R, N), dtype=torch.int64, device=dev)
        self.draft_logits = torch.zeros((o["cache_slots"], N, V), dtype=torch.bfloat16, device=dev)
        self.num_accepted = torch.zeros((R,), dtype=torch.int32, device=dev)
        self.verified = torch.zeros((R, N + 1), dtype=torch.int64, device=dev)
        self.block_tables = (
            torch.arange(R * P, dtype=torch.int32, device=dev).reshape(R, P).contiguous()
        )

    # ---- the target ----
    def _forward(self, ids: List[List[int]]):
        """The target on equally long sequences ``ids`` (positions 0 .. len-1): logits
        [B, len, V] fp32 and the taps' hidden states [B, len, taps * H_t] bf16."""
        x = torch.tensor(ids, dtype=torch.int64, device=self.device)
        with torch.no_grad():
            out = self.target(input_ids=x, use_cache=False, output_hidden_states=True)
        hs = out.hidden_states
        taps = torch.cat([hs[t + 1] for t in self.taps], dim=-1)
        return out.logits.float(), taps.to(torch.bfloat16)

    def _slots(self, row: int, start: int, count: int) -> torch.Tensor:
        pos = torch.arange(start, start + count, dtype=torch.int64)
        pages = self.block_tables[row].cpu().to(torch.int64)[pos // self.page_size]
        return (pages * self.page_size + pos % self.page_size).to(self.device)

    def _store(self, rows_hidden, rows_pos, rows_slots) -> None:
        if not rows_hidden:
            return
        t0 = time.perf_counter()
        hidden, pos, slots = torch.cat(rows_hidden), torch.cat(rows_pos), torch.cat(rows_slots)
        step = self.draft.max_context_tokens  # the CUDA backend's most tokens per call
        for i in range(0, pos.shape[0], step):
            self.draft.store_context(
                hidden[i : i + step].contiguous(),
                pos[i : i + step].contiguous(),
                slots[i : i + step].contiguous(),
            )
        _sync(self.device)
        self.stats.draft_seconds += time.perf_counter() - t0

    def profile_sps(self, max_tokens: Optional[int] = None, *, repeats: int = 5, seed: int = 0,
                    progress=None) -> List[float]:
        """The steps-per-second table of this target (contract.md 9.4, for
        sparkdraft.schedule's survival schedulers), profiled once: ``sps[b]`` for a verify
        step of b tokens, b = 1 .. max_tokens (default: max_rows * (N + 1), every row's
        whole block). This loop keeps no KV cache, so a verify step of b tokens is timed as
        the target's forward over one sequence of b seeded random tokens."""
        if max_tokens is None:
            max_tokens = self.max_rows * (self.N + 1)
        g = torch.Generator().manual_seed(seed)
        ids = torch.randint(0, self.V, (int(max_tokens),), generator=g).tolist()

        def step(b: int) -> None:
            self._forward([ids[:b]])
            _sync(self.device)

        return _profile_sps(step, int(max_tokens), repeats=repeats, progress=progress)

    # ---- the loop ----
    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        max_new_tokens: int,
        *,
        temperature: float = 0.0,
        seeds: Optional[Sequence[int]] = None,
        progress: bool = False,
        schedule: Optional[Callable] = None,
    ) -> List[List[int]]:
        """Generates ``max_new_tokens`` tokens for each prompt (at most max_rows prompts
        per call; a prompt needs at least one token). ``temperature`` 0 = greedy.

        ``schedule`` (adaptive draft length, contract.md section 9; needs a draft with the
        confidence head): called each round with the confidences [rows, N] (float32, on the
        draft's device; rows that are done are padding rows, +0) and returns how many drafts
        of each row to verify (int [rows] in [0, N]), e.g.
        ``lambda c: sparkdraft.schedule.threshold_lengths(c, 0.6)`` or a
        ``LaggedSurvivalScheduler(...).schedule``. Lossless either way: the verifier emits
        the target's law whatever the lengths."""
        if schedule is not None and not self.draft.config.get("enable_confidence_head"):
            raise InvalidArgument(
                "SpecDecoder.generate: a schedule needs the draft's confidence head "
                "(enable_confidence_head), which this checkpoint does not have"
            )
        if len(prompts) > self.max_rows:
            raise InvalidArgument(
                f"SpecDecoder.generate: {len(prompts)} prompts, at most {self.max_rows} per call"
            )
        if not math.isfinite(temperature) or temperature < 0:
            raise InvalidArgument(f"SpecDecoder.generate: temperature {temperature} must be finite and >= 0")
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
            raise InvalidArgument(
                f"SpecDecoder.generate: max_new_tokens {max_new_tokens!r} must be an int >= 0"
            )
        if seeds is not None and len(seeds) != len(prompts):
            raise InvalidArgument(
                f"SpecDecoder.generate: {len(seeds)} seeds for {len(prompts)} prompts (one a prompt)"
            )
        limit = self.pages_per_req * self.page_size
        for i, p in enumerate(prompts):
            if len(p) < 1:
                raise InvalidArgument(f"SpecDecoder.generate: prompt {i} is empty")
            if len(p) + max_new_tokens + self.N + 1 > limit:
                raise InvalidArgument(
                    f"SpecDecoder.generate: prompt {i} ({len(p)} tokens) + {max_new_tokens} new "
                    f"+ a block of {self.N} exceeds the draft's {limit} positions per row"
                )
        if max_new_tokens == 0:  # nothing to generate: no forward, no round
            return [[] for _ in prompts]
        seeds = list(seeds) if seeds is not None else list(range(len(prompts)))
        rows = [_Row(i, p, seeds[i], temperature) for i, p in enumerate(prompts)]
        R, N, dev = len(rows), self.N, self.device
        st = self.stats
        t_start = time.perf_counter()

        # Prefill: the prompt but its last token (the first anchor) is context.
        hid, pos, slots = [], [], []
        t0 = time.perf_counter()
        for group in _by_length([r for r in rows if len(r.prompt) > 1], lambda r: len(r.prompt)):
            _, taps = self._forward([r.prompt[:-1] for r in group])
            for r, h in zip(group, taps):
                n = len(r.prompt) - 1
                hid.append(h)
                pos.append(torch.arange(0, n, dtype=torch.int64, device=dev))
                slots.append(self._slots(r.index, 0, n))
        _sync(dev)
        st.target_seconds += time.perf_counter() - t0
        self._store(hid, pos, slots)

        anchors = torch.zeros((R,), dtype=torch.int64)
        positions = torch.zeros((R,), dtype=torch.int64)
        seeds_t = torch.tensor([r.seed for r in rows], dtype=torch.int64)
        temps = torch.full((R,), float(temperature), dtype=torch.float32)
        block_tables = self.block_tables[:R].contiguous()
        out_tokens = self.out_tokens[:R]
        num_accepted = self.num_accepted[:R]
        verified = self.verified[:R]
        total = R * max_new_tokens
        while not all(r.done for r in rows):
            live = [r for r in rows if not r.done]
            slots_t = torch.tensor([-1 if r.done else r.index for r in rows], dtype=torch.int64)
            for r in rows:
                anchors[r.index] = r.anchor
                positions[r.index] = r.a
            a_dev, p_dev = anchors.to(dev), positions.to(dev)
            s_dev, t_dev, c_dev = seeds_t.to(dev), temps.to(dev), slots_t.to(dev)

            t0 = time.perf_counter()
            conf = None
            if schedule is not None:
                conf = torch.zeros((R, N), dtype=torch.float32, device=dev)
            self.draft.propose(
                a_dev, p_dev, s_dev, t_dev, c_dev, block_tables, out_tokens, self.draft_logits,
                out_confidences=conf,
            )
            _sync(dev)
            st.draft_seconds += time.perf_counter() - t0
            lengths = None
            if schedule is not None:
                n = np.asarray(schedule(conf), dtype=np.int64).reshape(-1)
                if n.shape != (R,) or n.min() < 0 or n.max() > N:
                    raise InvalidArgument(
                        f"SpecDecoder.generate: the schedule returned {n.tolist()}: want {R} "
                        f"lengths in [0, {N}]"
                    )
                lengths = torch.tensor(n, dtype=torch.int32, device=dev)
            st.verified_drafts += sum(N if lengths is None else int(n[r.index]) for r in live)

            drafts = out_tokens.cpu()
            target_logits = torch.zeros((R, N + 1, self.V), dtype=torch.float32, device=dev)
            hidden = {}
            t0 = time.perf_counter()
            for group in _by_length(live, lambda r: r.a):
                seqs = [r.prompt + r.out + drafts[r.index].tolist() for r in group]
                logits, taps = self._forward(seqs)
                a = group[0].a
                for r, lg, h in zip(group, logits, taps):
                    target_logits[r.index] = lg[a : a + N + 1]
                    hidden[r.index] = h[a : a + N + 1]
            _sync(dev)
            st.target_seconds += time.perf_counter() - t0

            t0 = time.perf_counter()
            self.draft.verify(
                out_tokens, p_dev, s_dev, t_dev, c_dev, self.draft_logits, target_logits,
                num_accepted, verified, lengths=lengths, method=self.method,
            )
            _sync(dev)
            st.verify_seconds += time.perf_counter() - t0

            ks = num_accepted.cpu().tolist()
            toks = verified.cpu()
            hid, pos, slots = [], [], []
            for r in live:
                k = ks[r.index]
                emitted = toks[r.index, : k + 1].tolist()
                st.row_rounds += 1
                for j in range(k):
                    st.accepted[j] += 1
                r.out.extend(emitted)
                # The anchor and the k accepted drafts are context now.
                hid.append(hidden[r.index][: k + 1])
                pos.append(torch.arange(r.a, r.a + k + 1, dtype=torch.int64, device=dev))
                slots.append(self._slots(r.index, r.a, k + 1))
                r.anchor, r.a = emitted[-1], r.a + k + 1
                if len(r.out) >= max_new_tokens:
                    r.out = r.out[:max_new_tokens]
                    r.done = True
            self._store(hid, pos, slots)
            st.rounds += 1
            if progress:
                done = sum(len(r.out) for r in rows)
                bar = int(30 * done / max(total, 1))
                sys.stderr.write(f"\r[{'#' * bar}{'.' * (30 - bar)}] {done}/{total} tokens")
                sys.stderr.flush()
        if progress:
            sys.stderr.write("\n")
        st.seconds += time.perf_counter() - t_start
        st.tokens += sum(len(r.out) for r in rows)
        return [r.out for r in rows]


def make_target(
    *,
    vocab_size: int = 64,
    hidden_size: int = 64,
    num_layers: int = 4,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int = 128,
    max_positions: int = 512,
    initializer_range: float = 0.2,
    seed: int = 0,
    device="cpu",
    dtype=torch.float32,
):
    """A small Qwen3ForCausalLM with seeded random weights (nothing is downloaded): the
    target of the example and the tests. A wider initializer than transformers' 0.02
    gives peaked next-token distributions (greedy margins well above rounding)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = Qwen3Config(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        head_dim=hidden_size // num_heads,
        max_position_embeddings=max_positions,
        initializer_range=initializer_range,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
    cfg._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(cfg).to(device=device, dtype=dtype).eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model


def make_draft_checkpoint_for(target, dir, *, taps=None, block_size: int = 4, seed: int = 1,
                              **overrides):
    """A synthetic draft checkpoint (the tiny preset's layers) shaped for ``target``:
    its vocabulary, its hidden size, taps on its layers (default: the first, the
    middle and the last). ``overrides`` go to make_checkpoint (e.g.
    ``enable_confidence_head=True, confidence_head_with_markov=True`` for the head)."""
    from . import make_checkpoint

    cfg = target.config
    L = cfg.num_hidden_layers
    if taps is None:
        taps = sorted({0, L // 2, L - 1})
    return make_checkpoint(
        dir,
        "tiny",
        seed=seed,
        vocab_size=cfg.vocab_size,
        target_hidden_size=cfg.hidden_size,
        target_layer_ids=list(taps),
        block_size=block_size,
        **overrides,
    )
