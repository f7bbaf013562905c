"""Shared fixtures: a tiny synthetic checkpoint, the devices to test, seeded inputs.

CUDA tests skip, saying so, where this build has no CUDA backend or there is no GPU.
Every random input is seeded; the seed is in the test's parameters or printed."""

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))

import sparkdraft  # noqa: E402

try:
    import torch

    # The target's CPU forwards are tiny: one intra-op thread beats several on a loaded
    # machine by an order of magnitude (threads spinning for cores they do not get).
    torch.set_num_threads(1)
except ImportError:
    pass

NO_CUDA_REASON = (
    "no CUDA: this sparkdraft was built without the CUDA backend"
    if not sparkdraft.HAVE_CUDA
    else "no CUDA GPU in this process"
)


def require_cuda():
    if not sparkdraft.cuda_available():
        pytest.skip(NO_CUDA_REASON)


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    """The tiny preset (H 64, L 2, V 1000, N 7, 3 taps of H_t 48), seed 3."""
    return sparkdraft.make_checkpoint(tmp_path_factory.mktemp("tiny"), "tiny", seed=3)


@pytest.fixture(params=["cpu", "cuda"])
def device(request):
    if request.param == "cuda":
        require_cuda()
    return request.param


# Options every test draft uses: 8 rows of up to 64 positions (4 pages of 16).
OPTS = dict(max_reqs=8, num_pages=32, page_size=16, max_pages_per_req=4, cache_slots=8)
