"""Row samplers: shuffled mini-batches and balanced (equal count per stratum) batches."""

from __future__ import annotations

from typing import Iterator

import torch

__all__ = ["minibatches", "BalancedSampler"]


def minibatches(n: int, batch_size: int | None, generator: torch.Generator) -> Iterator[torch.Tensor | None]:
    """Index tensors of one shuffled epoch; a single ``None`` (the full data) if
    ``batch_size`` is None or covers all rows."""
    if batch_size is None or batch_size >= n:
        yield None
        return
    perm = torch.randperm(n, generator=generator)
    for start in range(0, n, batch_size):
        yield perm[start : start + batch_size]


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
