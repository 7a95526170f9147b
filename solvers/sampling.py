"""Row samplers: shuffled mini-batches and balanced (equal count per stratum) batches."""

from __future__ import annotations

import math
from typing import Iterator

import torch

__all__ = ["covers_all_rows", "minibatches", "BalancedSampler"]


def covers_all_rows(batch_size: int | None, n: int) -> bool:
    """Whether ``batch_size`` means full-batch steps on ``n`` rows: None, or at least ``n``."""
    return batch_size is None or batch_size >= n


def minibatches(n: int, batch_size: int | None, generator: torch.Generator,
                steps: int | None = None) -> Iterator[torch.Tensor | None]:
    """Index tensors of one shuffled epoch, or a single None (the full data) when ``batch_size`` is None
    or covers all rows; with ``steps`` (data-parallel: every rank takes the same number) exactly
    that many batches, reshuffling when the rows run out."""
    if steps is None:
        if covers_all_rows(batch_size, n):
            yield None
            return
        steps = math.ceil(n / batch_size)  # one shuffled pass
    size = n if batch_size is None else min(int(batch_size), n)
    perm, start = torch.randperm(n, generator=generator), 0
    for _ in range(int(steps)):
        if start >= n:
            perm, start = torch.randperm(n, generator=generator), 0
        yield perm[start : start + size]
        start += size


class BalancedSampler:
    """Batches of ``per_stratum`` rows (capped at the stratum size) from every stratum of ``strata``
    (n,), drawn uniformly without replacement, so that group means over the same strata are
    unbiased ([SQP] Thm 3.1)."""

    def __init__(self, strata: torch.Tensor, per_stratum: int, generator: torch.Generator) -> None:
        if per_stratum < 1:
            raise ValueError(f"per_stratum: expected a positive integer, got {per_stratum!r}")
        strata = torch.as_tensor(strata).reshape(-1).long()
        self.groups = [torch.nonzero(strata == s).reshape(-1) for s in torch.unique(strata)]
        if any(len(g) == 0 for g in self.groups):  # pragma: no cover - unique() never yields empty
            raise ValueError("strata: a stratum is empty")
        self.per_stratum = int(per_stratum)
        self.generator = generator

    def sample(self) -> torch.Tensor:
        """Indices of one balanced batch (sorted within each stratum's draw)."""
        parts = []
        for rows in self.groups:
            k = min(self.per_stratum, len(rows))
            pick = torch.randperm(len(rows), generator=self.generator)[:k]
            parts.append(rows[pick])
        return torch.cat(parts)
