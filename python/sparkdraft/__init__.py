"""sparkdraft: the draft side of DSpark speculative decoding, bit for bit.

The Python face of the C++/CUDA runtime (docs/python.md). Arrays are any object with
``__dlpack__`` (torch tensors, CuPy arrays; numpy arrays on the CPU backend), taken
zero-copy: nothing is copied in or out of a call. torch is optional; when it is
imported, ``stream=None`` means torch's current stream.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Optional, Sequence

from . import _core
from ._core import (
    CheckpointError,
    ConfigError,
    DeviceError,
    DTypeError,
    Error,
    InvalidArgument,
    IoError,
    NonFiniteWeights,
    Unavailable,
)

__version__ = _core.__version__
HAVE_CUDA: bool = _core.HAVE_CUDA

__all__ = [
    "Checkpoint",
    "Draft",
    "Bound",
    "make_checkpoint",
    "preset_config",
    "cuda_available",
    "Error",
    "ConfigError",
    "CheckpointError",
    "NonFiniteWeights",
    "InvalidArgument",
    "DTypeError",
    "IoError",
    "Unavailable",
    "DeviceError",
    "SpecDecoder",
]


def cuda_available() -> bool:
    """Whether this build has the CUDA backend and a usable GPU."""
    return bool(_core.cuda_available())


def preset_config(preset: str = "tiny", style: str = "") -> dict:
    """The config (our JSON form, as a dict) of a named synthetic shape."""
    return json.loads(_core.preset_config(preset, style))


# Fields of our JSON config written only when set (src/io/config.cpp, our_optional_keys): a preset
# without them still takes them as overrides.
_OPTIONAL_CONFIG_FIELDS = (
    "draft_vocab_size",
    "markov_topk",
    "markov_bias_topk",
    "confidence_temperatures",
    "markov_head_type",
)


def make_checkpoint(
    dir: str,
    preset: str = "tiny",
    *,
    style: str = "",
    seed: int = 1,
    hf_config: bool = True,
    **overrides: Any,
) -> "Checkpoint":
    """Writes a synthetic checkpoint (seeded weights) and returns it loaded.

    ``overrides`` replace fields of the preset's config, e.g. the shape of a draft for a
    given target: ``vocab_size``, ``target_hidden_size``, ``target_layer_ids`` (the taps:
    layer i is the output of the target's decoder layer i, -1 its embeddings),
    ``block_size``, ``markov_topk`` (the top-k Markov loop), ``markov_head_type``
    ("vanilla", "gated" or "rnn": DeepSpec's Markov heads). When ``vocab_size`` is given and the preset's ``mask_token_id`` is out
    of range, the mask token becomes ``vocab_size - 1``. Refused fields raise ConfigError.
    """
    config = preset_config(preset, style)
    unknown = sorted(set(overrides) - set(config) - set(_OPTIONAL_CONFIG_FIELDS))
    if unknown:
        raise ConfigError(f"make_checkpoint: unknown config fields {unknown}")
    config.update(overrides)
    if "vocab_size" in overrides and "mask_token_id" not in overrides:
        if config["mask_token_id"] >= config["vocab_size"]:
            config["mask_token_id"] = config["vocab_size"] - 1
    _core.write_checkpoint(json.dumps(config), str(dir), seed, hf_config)
    return Checkpoint(dir)


class Checkpoint:
    """A draft checkpoint: config.json + safetensors, loaded and validated.

    ``target_model``: the target (verifier) model's directory, for a speculators
    checkpoint, which leaves out the verifier's ``embed_tokens.weight`` and, with the
    full vocabulary, ``lm_head.weight``: those the draft lacks are read from the
    target's safetensors (a target with ``tie_word_embeddings`` serves lm_head from its
    embeddings). Nothing else of the target is read; the draft's own tensors win.
    """

    def __init__(
        self, dir: str, *, allow_nonfinite: bool = False, target_model: Optional[str] = None
    ):
        target = "" if target_model is None else str(target_model)
        self._ck = _core.Checkpoint(str(dir), allow_nonfinite, target)
        self.config: dict = json.loads(self._ck.config_json())

    @property
    def dir(self) -> str:
        return self._ck.dir

    @property
    def total_bytes(self) -> int:
        return self._ck.total_bytes

    @property
    def plan(self) -> list:
        """The CPU backend's plan at tp 1 (a Draft's ``plan`` is its backend's own)."""
        return self._ck.cpu_plan(1)

    def __repr__(self) -> str:
        c = self.config
        return (
            f"Checkpoint({self.dir!r}: H {c['hidden_size']}, L {c['num_layers']}, "
            f"V {c['vocab_size']}, N {c['block_size']}, taps {c['target_layer_ids']} "
            f"of H_t {c['target_hidden_size']})"
        )


def _parse_device(device: Any) -> tuple:
    if device is None:
        return ("cpu", 0)
    if not isinstance(device, str):  # e.g. torch.device
        device = str(device)
    if device == "cpu":
        return ("cpu", 0)
    if device == "cuda":
        return ("cuda", 0)
    if device.startswith("cuda:"):
        try:
            return ("cuda", int(device[5:]))
        except ValueError:
            pass
    raise InvalidArgument(f'Draft: device {device!r} (give "cpu" or "cuda[:N]")')


class Draft:
    """A draft model on one device, ready to store context and propose.

    Options as in the C++ DraftOptions: ``max_reqs`` rows per call, ``num_pages`` KV
    pages per layer of ``page_size`` positions, block tables of ``max_pages_per_req``
    entries, ``cache_slots`` rows of the draft-logits cache, ``tp`` ranks (the CPU
    backend's threads; the CUDA backend drafts at tp 1 here). ``kv_caches``: the
    caller's KV cache per layer ([num_pages * page_size, kv_heads, 2 * head_dim] bf16 on
    the draft's device), used in place of the draft's own and kept alive by it.
    ``validate`` (CUDA backend): the eager calls copy the small index arrays to the host
    and run the library's value checks first (a synchronization; off for the hot path;
    never while the stream is capturing; the bound form never does).
    """

    def __init__(
        self,
        checkpoint: "Checkpoint | str",
        device: Any = "cpu",
        *,
        max_reqs: int = 8,
        num_pages: int = 256,
        page_size: int = 16,
        max_pages_per_req: int = 64,
        cache_slots: Optional[int] = None,
        tp: int = 1,
        threads: int = 0,
        max_context_tokens: int = 1024,
        cuda_graph: bool = True,
        validate: bool = True,
        kv_caches: Optional[Sequence[Any]] = None,
    ):
        if not isinstance(checkpoint, Checkpoint):
            checkpoint = Checkpoint(checkpoint)
        self.checkpoint = checkpoint
        kind, index = _parse_device(device)
        self._cpu = kind == "cpu"
        self._device_index = index
        self._d = _core.Draft(
            checkpoint._ck,
            kind,
            index,
            max_reqs,
            num_pages,
            page_size,
            max_pages_per_req,
            max_reqs if cache_slots is None else cache_slots,
            tp,
            threads,
            max_context_tokens,
            cuda_graph,
            validate,
            list(kv_caches) if kv_caches is not None else [],
        )
        self.config: dict = checkpoint.config
        self.options: dict = self._d.options()
        self.max_context_tokens = max_context_tokens  # per store_context call on the GPU
        _register(self)

    # ---- properties ----
    @property
    def device(self) -> str:
        return self._d.device

    @property
    def backend(self) -> str:
        return self._d.backend

    @property
    def plan(self) -> list:
        """What runs: one dict per part of the step (part, variant, reason)."""
        return self._d.plan()

    @property
    def block_size(self) -> int:
        return self.config["block_size"]

    @property
    def vocab_size(self) -> int:
        return self.config["vocab_size"]

    def last_timings(self) -> dict:
        """The CPU backend's stage timings of the last call (ms)."""
        return self._d.last_timings()

    # ---- streams ----
    def _stream(self, stream: Any) -> int:
        if self._cpu:
            return 0
        if stream is None:
            torch = sys.modules.get("torch")
            if torch is None:
                raise TypeError(
                    "stream=None means torch's current stream, and torch is not imported: "
                    "pass the cudaStream_t as an int"
                )
            return torch.cuda.current_stream(self._device_index).cuda_stream
        if isinstance(stream, int):
            return stream
        for attr in ("cuda_stream", "ptr"):  # torch.cuda.Stream, cupy.cuda.Stream
            v = getattr(stream, attr, None)
            if isinstance(v, int):
                return v
        raise TypeError(f"stream: give None, an int cudaStream_t or a stream object, not {stream!r}")

    # ---- the calls ----
    def store_context(self, hidden, positions, slots, stream=None) -> None:
        """Stores target hidden states [T, taps * H_t] (bf16) of newly verified tokens at
        ``positions`` [T] (int64) into the KV ``slots`` [T] (int64, -1 = skip)."""
        self._d.store_context(hidden, positions, slots, self._stream(stream))

    def propose(
        self,
        anchor_tokens,
        anchor_positions,
        seeds,
        temperatures,
        cache_slots,
        block_tables,
        out_tokens,
        out_draft_logits,
        stream=None,
        out_confidences=None,
        lengths=None,
    ) -> None:
        """Drafts N tokens per row into ``out_tokens`` [rows, N] (int64) and the
        draft-logits cache ``out_draft_logits`` [cache_slots, N, V] (bf16, the rows of the
        slots used). Inputs per row: anchor token and position (int64), seed (int64),
        temperature (float32 >= 0), cache slot (int64, -1 = padding row), block table
        [rows, max_pages_per_req] (int32). A draft with the confidence head
        (``enable_confidence_head``) also writes ``out_confidences`` [rows, N] (float32)
        when given: the predicted survival of each drafted position (padding rows 0).
        ``lengths`` [rows] int32 in [0, N] (optional: N) drafts only the first lengths[r]
        steps of row r (contract.md 9.5): they are bit for bit the steps a call without
        lengths gives; past it the tokens are -1, the cache rows are not written and the
        confidences are 0. The same lengths then go to ``verify``."""
        self._d.propose(
            anchor_tokens,
            anchor_positions,
            seeds,
            temperatures,
            cache_slots,
            block_tables,
            out_tokens,
            out_draft_logits,
            self._stream(stream),
            out_confidences,
            lengths,
        )

    def verify(
        self,
        draft_tokens,
        anchor_positions,
        seeds,
        temperatures,
        cache_slots,
        draft_logits,
        target_logits,
        out_num_accepted,
        out_tokens,
        *,
        top_k=None,
        top_p=None,
        lengths=None,
        method: str = "standard",
        stream=None,
    ) -> None:
        """The lossless verifier (docs/contract.md section 8): per row accepts k of the N
        drafts (``draft_tokens`` [rows, N] int64, propose's out_tokens) against the
        target's logits ``target_logits`` [rows, N + 1, V] (bf16 or float32) and the
        draft-logits cache ``draft_logits`` [cache_slots, N, V] (bf16, propose's), then
        emits one token: ``out_num_accepted`` [rows] (int32) gets k, ``out_tokens``
        [rows, N + 1] (int64) the k drafts, the emitted token, then -1. Anchor positions,
        seeds, temperatures and cache slots as given to propose (-1 = padding row,
        untouched). ``top_k`` [rows] int32 (0 = off) and ``top_p`` [rows] float32 (1 = off)
        are optional; ``lengths`` [rows] int32 in [0, N] (optional: N) verifies only the
        first lengths[r] drafts of row r (the adaptive length: e.g. sparkdraft.schedule's
        lengths; k <= lengths[r], the bonus drawn at position lengths[r]); ``method``
        "standard" or "block"."""
        self._d.verify(
            draft_tokens,
            anchor_positions,
            seeds,
            temperatures,
            cache_slots,
            draft_logits,
            target_logits,
            out_num_accepted,
            out_tokens,
            top_k,
            top_p,
            lengths,
            method,
            self._stream(stream),
        )

    def bind(self, **buffers) -> "Bound":
        """Validates and pins persistent buffers once (the bind-once form).

        Give the propose buffers (anchor_tokens, anchor_positions, seeds, temperatures,
        cache_slots, block_tables, out_tokens, out_draft_logits: their leading extent is
        the most rows a call may use), and with them optionally the verify buffers
        (target_logits, out_num_accepted, out_verified, top_k, top_p, lengths, method: verify
        reads the bound drafts, positions, seeds, temperatures, slots and cache), and/or
        the context buffers (hidden, positions, slots). The returned Bound keeps every
        array (and its owner) alive; its calls take a row or token count and a stream,
        and no arrays. Values are not checked per call on the CUDA backend (keep them in
        range, as the C++ device API says); the CPU backend checks them anyway.
        """
        return Bound(self, self._d.bind(**buffers))

    def kv_cache(self, layer: int):
        """A zero-copy view of layer ``layer``'s KV cache [num_pages * page_size, kv_heads,
        2 * head_dim] bf16 (K in [..., :head_dim], V in [..., head_dim:]): a torch tensor when
        torch is importable, else (CPU) a numpy uint16 array of the bf16 bits. The view
        keeps the draft alive."""
        torch = _torch()
        if torch is not None:
            return torch.from_dlpack(self._d.kv_cache_view(layer, False))
        import numpy as np

        return np.from_dlpack(self._d.kv_cache_view(layer, True))

    def kv_cache_copy(self, layer: int):
        """A host copy (numpy uint16, the bf16 bits) of layer ``layer``'s KV cache."""
        return self._d.kv_cache_copy(layer)

    def __repr__(self) -> str:
        return f"Draft({self.backend} on {self.device}, {self.options})"


class Bound:
    """Buffers bound once to a Draft: ``propose(num_rows, stream)``,
    ``verify(num_rows, stream)`` and ``store_context(num_tokens, stream)`` use the first
    rows / tokens of them. On the CUDA backend ``propose`` replays the backend's own
    graph for that row count (captured at its first use) unless the stream is capturing
    (then its kernels go into the caller's graph)."""

    def __init__(self, draft: Draft, bound):
        self._draft = draft
        self._b = bound

    @property
    def max_rows(self) -> int:
        return self._b.max_rows

    @property
    def max_tokens(self) -> int:
        return self._b.max_tokens

    def propose(self, num_rows: int, stream=None) -> None:
        self._b.propose(num_rows, self._draft._stream(stream))

    def verify(self, num_rows: int, stream=None) -> None:
        self._b.verify(num_rows, self._draft._stream(stream))

    def store_context(self, num_tokens: int, stream=None) -> None:
        self._b.store_context(num_tokens, self._draft._stream(stream))


# ---- torch integration (sparkdraft.torch_ops: custom ops for torch.compile) ----

_DRAFTS: dict = {}


def _register(draft: Draft) -> None:
    import weakref

    key = id(draft)
    _DRAFTS[key] = weakref.ref(draft)
    draft._key = key
    weakref.finalize(draft, _DRAFTS.pop, key, None)


def _draft_of(key: int) -> Draft:
    ref = _DRAFTS.get(key)
    d = ref() if ref is not None else None
    if d is None:
        raise InvalidArgument(f"sparkdraft op: no live Draft with key {key}")
    return d


def _torch():
    torch = sys.modules.get("torch")
    if torch is not None:
        return torch
    try:
        import torch  # noqa: F401
    except ImportError:
        return None
    return sys.modules["torch"]


def __getattr__(name: str):
    if name == "SpecDecoder":
        from .spec import SpecDecoder

        return SpecDecoder
    if name == "ops":
        from . import torch_ops

        return torch_ops
    raise AttributeError(f"module 'sparkdraft' has no attribute {name!r}")
