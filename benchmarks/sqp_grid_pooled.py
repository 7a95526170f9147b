"""The mini-batch grid's comparison with each peer, pooled over several grids' seeds
(``python benchmarks/sqp_stochastic.py --pool DIR [DIR ...] --out OUT``).

Each grid (``benchmarks/sqp_grid.py``) runs three seeds per (data set, model, batch) cell; two
grids over disjoint seeds give six paired runs per cell. Per cell where fairopt and the peer both
meet the bound on every pooled seed, the paired difference ``d_s = ours_s - peer_s`` of the train
accuracy, test accuracy and training loss over the seeds ``s``: its mean, and the 95% confidence
interval ``mean +- t_{0.975, k-1} sd(d) / sqrt(k)`` (Student's t over the ``k`` seeds; the runs of
one seed share their split and initialisation). A mean below zero with an interval that reaches
above it is a difference the seeds cannot tell from zero; the report lists both. Writes
``pooled.md`` and ``pooled.png`` (the intervals per cell and peer, a forest plot) into ``--out``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from _common import commit
from sqp_grid import _cell_order, _mean, mini_batch_cells, peer_pairs

#: The parts compared, with the direction in which fairopt is ahead (+1: larger is better).
POOLED_PARTS = (("train_acc", 1), ("test_acc", 1), ("train_loss", -1))


def pooled_records(folders: list[Path]) -> tuple[list[dict], list[str]]:
    """The runs of every ``folder/grid.json`` and one provenance line per grid (its command and
    commit); a (data set, model, batch, seed, method) run found in two grids is a ``SystemExit``
    (the pooled seeds must be disjoint)."""
    records, seen, provenance = [], {}, []
    for folder in folders:
        path = folder / "grid.json"
        if not path.is_file():
            raise SystemExit(f"--pool: no grid.json in {folder}")
        for r in json.loads(path.read_text()):
            key = (r["dataset"], r["model"], r["batch"], r["seed"], r["method"])
            if key in seen:
                raise SystemExit(f"--pool: run {key} is in both {seen[key]} and {folder}")
            seen[key] = folder
            records.append(r)
        md = folder / "grid.md"
        head = md.read_text().splitlines()[:2] if md.is_file() else []
        provenance.append(f"# {folder}: " + "; ".join(line.removeprefix("# ") for line in head))
    return records, provenance


def paired_interval(diffs: list[float]) -> tuple[float, float]:
    """``(mean, half-width)`` of the 95% Student-t interval of the mean of ``diffs`` (half-width
    infinite for fewer than two values)."""
    from scipy import stats

    k = len(diffs)
    mean = _mean(diffs)
    if k < 2:
        return mean, math.inf
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (k - 1))
    return mean, float(stats.t.ppf(0.975, k - 1)) * sd / math.sqrt(k)


def pooled_intervals(records: list[dict]) -> dict[str, dict[tuple, tuple[int, dict[str, tuple[float, float]]]]]:
    """Per peer, per (data set, model, batch) cell where both meet the bound on every seed: the
    number of seeds and, per part of :data:`POOLED_PARTS` the runs record, ``(mean, half-width)`` of
    :func:`paired_interval` over the paired differences ``ours - peer`` (accuracies in points)."""
    cells, peers = mini_batch_cells(records)
    result: dict[str, dict[tuple, tuple[int, dict[str, tuple[float, float]]]]] = {}
    for peer in peers:
        result[peer] = {}
        for key, pairs in peer_pairs(cells, peer).items():
            parts = {part: paired_interval([(100.0 if part.endswith("acc") else 1.0) * (o[part] - q[part])
                                            for o, q in pairs])
                     for part, _ in POOLED_PARTS if all(part in o and part in q for o, q in pairs)}
            result[peer][key] = (len(pairs), parts)
    return result


def pooled_plot(records: list[dict], path: Path) -> None:
    """A forest plot: per peer (columns) and part (rows: train accuracy, test accuracy, training
    loss), each cell's mean paired difference ``ours - peer`` with its 95% interval; the zero line
    is a tie, and the side of fairopt's advantage is labelled."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    intervals = pooled_intervals(records)
    peers = list(intervals)
    if not peers:
        return
    fig, axes = plt.subplots(len(POOLED_PARTS), len(peers), figsize=(5.5 * len(peers), 3.2 * len(POOLED_PARTS)),
                             squeeze=False)
    for column, peer in enumerate(peers):
        cells = sorted(intervals[peer], key=_cell_order)
        for row, (part, sign) in enumerate(POOLED_PARTS):
            ax = axes[row][column]
            shown = [c for c in cells if part in intervals[peer][c][1]]
            for y, cell in enumerate(shown):
                mean, half = intervals[peer][cell][1][part]
                ahead = sign * mean >= 0
                ax.errorbar(mean, y, xerr=half if math.isfinite(half) else None, fmt="o", markersize=4,
                            color="tab:green" if ahead else "tab:red", capsize=2)
            ax.axvline(0.0, color="0.4", linewidth=0.6)
            ax.set_yticks(range(len(shown)), [f"{d} {m} {b}" for d, m, b in shown], fontsize=7)
            unit = "points" if part.endswith("acc") else "loss"
            better = "right" if sign > 0 else "left"
            ax.set_xlabel(f"{part.replace('_', ' ')}: ours - {peer} ({unit}; fairopt better to the {better})",
                          fontsize=8)
    fig.suptitle("paired differences over the pooled seeds, 95% intervals")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def pooled_report(records: list[dict]) -> list[str]:
    """Per peer, a table of the cells where both meet the bound on every seed (paired mean
    differences with their 95% intervals, in accuracy points and loss units) and a summary: the
    cells where fairopt's mean is behind, and those whose whole interval is behind."""
    lines: list[str] = []
    for peer, cells in pooled_intervals(records).items():
        head = ["dataset", "model", "batch", "seeds", "train acc (ours - peer, points)",
                "test acc (ours - peer, points)", "training loss (ours - peer)"]
        lines += ["", f"## fairopt against {peer}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        behind: dict[str, list[str]] = {part: [] for part, _ in POOLED_PARTS}
        clearly: dict[str, list[str]] = {part: [] for part, _ in POOLED_PARTS}
        for key in sorted(cells, key=_cell_order):
            seeds, parts = cells[key]
            row = [key[0], key[1], str(key[2]), str(seeds)]
            for part, sign in POOLED_PARTS:
                if part not in parts:
                    row.append("-")
                    continue
                mean, half = parts[part]
                digits = 2 if part.endswith("acc") else 4
                row.append(f"{mean:+.{digits}f} +- {half:.{digits}f}")
                name = f"{key[0]} {key[1]} {key[2]} {mean:+.{digits}f}"
                if sign * mean < 0:
                    behind[part].append(name)
                    if sign * (mean + sign * half) < 0:
                        clearly[part].append(name)
            lines.append("| " + " | ".join(row) + " |")
        lines.append("")
        for part, _ in POOLED_PARTS:
            word = "higher" if part == "train_loss" else "behind"
            lines.append(f"{part}: on {len(cells)} cells, fairopt's mean {word} on {len(behind[part])}"
                         + (f" ({', '.join(behind[part])})" if behind[part] else "")
                         + f"; the whole 95% interval {word} on {len(clearly[part])}"
                         + (f" ({', '.join(clearly[part])})" if clearly[part] else ""))
    return lines


def render_pooled(folders: list[Path], out: Path) -> int:
    """``--pool``: ``out/pooled.md`` from the grids in ``folders``."""
    records, provenance = pooled_records(folders)
    seeds = sorted({r["seed"] for r in records})
    lines = [f"# pooled at commit {commit()}", *provenance, "",
             f"Seeds {', '.join(map(str, seeds))}; per (data set, model, batch) cell where fairopt and the peer "
             "meet the bound on every seed: the mean of the paired differences over the seeds, +- the half-width "
             "of its 95% Student-t interval.", *pooled_report(records)]
    (out / "pooled.md").write_text("\n".join(lines) + "\n")
    pooled_plot(records, out / "pooled.png")
    print("\n".join(lines))
    print(f"wrote {out / 'pooled.md'} and {out / 'pooled.png'}")
    return 0
