"""Row samplers: shuffled mini-batches and balanced (equal count per stratum) batches."""

from __future__ import annotations

import math
from typing import Iterator

import torch

__all__ = ["minibatches", "BalancedSampler"]


def minibatches(n: int, batch_size: int | None, generator: torch.Generator,
                steps: int | None = None) -> Iterator[torch.Tensor | None]:
    """Index tensors of one shuffled epoch; a single ``None`` (the full data) if
    ``batch_size`` is None or covers all rows (and no ``steps`` are asked for).

    ``steps`` (data-parallel mini-batches, where every rank must take the same number of
    steps): exactly ``steps`` batches of at most ``batch_size`` rows, from as many
    shuffled passes over the ``n`` rows as needed (a rank with fewer rows than the others
    starts a new permutation when its rows run out); with ``steps = ceil(n / batch_size)``
    the batches are those of the call without ``steps``."""
    if steps is None:
        if batch_size is None or batch_size >= n:
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
    """Draw batches with the same number of rows from every stratum.

    Within each stratum rows are drawn uniformly without replacement, so the batch mean
    of any per-row quantity over the rows of stratum ``s`` is an unbiased estimate of its
    full-data mean over stratum ``s`` ([SQP] Thm 3.1). Constraints built from group means
    of the SAME strata (e.g. disparate impact on the stratifying attribute) therefore get
    unbiased row values.

    Parameters
    ----------
    strata : torch.Tensor
        Long tensor (n,) of stratum ids.
    per_stratum : int
        Rows drawn from each stratum (capped at the stratum size).
    generator : torch.Generator
        Source of randomness.
    """

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
