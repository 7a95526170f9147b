"""Shared fixtures. Tests that need the real benchmark data skip when it is absent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

SHARED_DATA = Path(os.environ.get("FAIROPT_SHARED_DATA", Path(__file__).resolve().parents[1] / ".." / "shared" / "data")).resolve()


@pytest.fixture(autouse=True)
def _deterministic():
    torch.manual_seed(0)
    yield


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The directory of real benchmark data (../shared/data); skips the test if absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"benchmark data directory {SHARED_DATA} is absent")
    return SHARED_DATA


class TensorRows:
    """The least data an engine takes (``X``, ``y``, ``len``, ``subset``), for tests on hand-made tensors."""

    def __init__(self, X, y):
        self.X, self.y = X, y

    def __len__(self):
        return self.X.shape[0]

    def subset(self, idx):
        return TensorRows(self.X[idx], self.y[idx])


def require_shared_file(name: str) -> Path:
    path = SHARED_DATA / name
    if not path.exists():
        pytest.skip(f"benchmark data file {path} is absent")
    return path


@pytest.fixture(scope="module")
def one_torch_thread():
    """One torch thread for the module (small problems are dominated by thread overhead on
    shared cores); the previous count is restored afterwards."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
