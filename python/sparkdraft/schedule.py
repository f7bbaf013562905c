"""Adaptive draft length from the confidence head (contract.md section 9): how many of each
row's N drafts to verify, from ``Draft.propose``'s ``out_confidences`` [rows, N] float32.

Every function takes the confidences as a float32 array on the host (numpy, or a torch
tensor, copied to the host when it is on a GPU) and returns the lengths as an int32 numpy
array [rows]: verify the drafts 1 .. lengths[r]. ``sps`` is a steps-per-second table:
``sps[b]`` for a verify batch of b tokens, with more entries than rows."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from . import _core
from ._core import DTypeError


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
