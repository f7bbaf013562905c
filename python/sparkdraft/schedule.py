"""Adaptive draft length from the confidence head (contract.md section 9): how many of each
row's N drafts to verify, from ``Draft.propose``'s ``out_confidences`` [rows, N] float32.

Every function takes the confidences as a float32 array on the host (numpy, or a torch
tensor, copied to the host when it is on a GPU) and returns the lengths as an int32 numpy
array [rows]: verify the drafts 1 .. lengths[r]. ``sps`` is a steps-per-second table:
``sps[b]`` for a verify batch of b tokens, with more entries than rows; ``profile_sps``
measures one (``SpecDecoder.profile_sps`` over a transformers target)."""

from __future__ import annotations

import time
from typing import Callable, List, Optional, Sequence

import numpy as np

from . import _core
from ._core import DTypeError, InvalidArgument


def _host(confidences) -> np.ndarray:
    if hasattr(confidences, "detach"):  # a torch tensor
        import torch

        if confidences.dtype != torch.float32:
            raise DTypeError(f"confidences: dtype {confidences.dtype}, expected torch.float32")
        confidences = confidences.detach().cpu().contiguous().numpy()
    a = np.asarray(confidences)
    if a.dtype != np.float32:
        raise DTypeError(f"confidences: dtype {a.dtype}, expected float32")
    if a.ndim != 2:
        raise DTypeError(f"confidences: {a.ndim} dimensions, expected [rows, N]")
    return np.ascontiguousarray(a)


def _lengths(values) -> np.ndarray:
    return np.asarray(values, dtype=np.int32)


def threshold_lengths(confidences, threshold: float) -> np.ndarray:
    """Section 9.3: per row, the number of leading confidences >= threshold (a NaN cuts)."""
    return _lengths(_core.threshold_lengths(_host(confidences), float(threshold)))


def survival_greedy_lengths(confidences, sps: Sequence[float]) -> np.ndarray:
    """Section 9.4, Algorithm 1: admit (row, position) pairs by survival product while the
    tokens per second improve; stop at the first that does not."""
    return _lengths(_core.survival_greedy_lengths(_host(confidences), [float(x) for x in sps]))


def survival_capacity(confidences, sps: Sequence[float]) -> int:
    """Section 9.4: the number of drafts that maximizes the tokens per second (the whole curve)."""
    return int(_core.survival_capacity(_host(confidences), [float(x) for x in sps]))


def survival_admit(confidences, capacity: int) -> np.ndarray:
    """The first ``capacity`` pairs of the survival ranking, as lengths."""
    return _lengths(_core.survival_admit(_host(confidences), int(capacity)))


class LaggedSurvivalScheduler:
    """Section 9.4, the production scheduler: step t admits by the capacity computed from the
    confidences of step t - 2 (``initial_capacity`` at steps 0 and 1)."""

    def __init__(self, sps: Sequence[float], initial_capacity: int):
        self._s = _core.LaggedSurvivalScheduler([float(x) for x in sps], int(initial_capacity))

    def schedule(self, confidences) -> np.ndarray:
        return _lengths(self._s.schedule(_host(confidences)))

    @property
    def last_capacity(self) -> int:
        return int(self._s.last_capacity)

    @property
    def step(self) -> int:
        return int(self._s.step)


def profile_sps(
    step: Callable[[int], None],
    max_tokens: int,
    *,
    repeats: int = 5,
    warmup: int = 1,
    progress: Optional[Callable[[int, float], None]] = None,
) -> List[float]:
    """Profiles a steps-per-second table (section 9.4) once: for b = 1 .. max_tokens, ``step(b)``
    runs one verify step of b tokens and returns when it is done (synchronize a GPU inside it);
    after ``warmup`` untimed calls, ``sps[b]`` = 1 / the median of ``repeats`` timed calls.
    ``sps[0]`` = ``sps[1]`` (every row adds a token, so no batch has fewer than one). Returns
    max_tokens + 1 values, so it serves up to max_tokens rows. ``progress(b, seconds)`` (optional)
    is called after each b."""
    if int(max_tokens) < 1 or int(repeats) < 1 or int(warmup) < 0:
        raise InvalidArgument(
            f"profile_sps: max_tokens {max_tokens} and repeats {repeats} must be >= 1, "
            f"warmup {warmup} >= 0"
        )
    sps = [0.0] * (int(max_tokens) + 1)
    for b in range(1, int(max_tokens) + 1):
        for _ in range(int(warmup)):
            step(b)
        times = []
        for _ in range(int(repeats)):
            t0 = time.perf_counter()
            step(b)
            times.append(time.perf_counter() - t0)
        seconds = float(np.median(times))
        if not seconds > 0.0:
            raise InvalidArgument(f"profile_sps: step({b}) took no measurable time")
        sps[b] = 1.0 / seconds
        if progress is not None:
            progress(b, seconds)
    sps[0] = sps[1]
    return sps
