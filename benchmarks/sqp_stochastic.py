"""Mini-batch SQP against full-batch SQP: time to a model feasible on ALL training rows.

Each configuration runs in a fresh process (so its peak resident memory is its own) on the
same seeded 70/30 split, ``DisparateImpact(sex, delta)`` with the sigmoid rate surrogate the
estimators use, and reports the wall time, the returned model's train/test DI and accuracy,
whether it meets the bound on every training row (exact measure), the engine's status and
the peak memory; one plot of exact violation and loss against wall time per dataset.

    python benchmarks/sqp_stochastic.py                          # Dutch (MLP 32) and ACS-Colorado (linear)
    python benchmarks/sqp_stochastic.py --datasets dutch --seeds 0 1 2
    python benchmarks/sqp_stochastic.py --synthetic 1000000      # n = 1e6 synthetic rows, mini-batch only
                                                                 # (in memory, and memory-mapped from disk)
    python benchmarks/sqp_stochastic.py --grid --peers           # accuracy grid (below)
    python benchmarks/sqp_stochastic.py --pool GRID1 GRID2 --out DIR   # grids' seeds pooled (below)

``--grid``: the accuracy grid of 5 data sets x 2 models x 2 batch sizes x 3 seeds against the full
batch and, with ``--peers``, humancompatible-train (``benchmarks/sqp_grid.py`` says what it runs
and writes). ``--pool`` compares fairopt with each peer over the seeds of several such grids
(``benchmarks/sqp_grid_pooled.py``: paired differences with 95% intervals).

``--repeats R`` runs every job ``R`` times, round-robin over all jobs (a fresh process each
time), and reports the median wall time with the other figures of the first repetition (the
runs are deterministic; a table line says so where repetitions differ). On
a shared machine one fit's time drifts by tens of per cent from minute to minute (the same
500-epoch full-batch fit took 3.0 and 5.3 s in two runs ten minutes apart), so a single run
says little about a ratio of two configurations; the table then ends with the per-seed ratio
of each mini-batch configuration's median time to the full batch's.

Configurations: ``full`` (full batch, 500 epochs: the estimator's default), ``full300``
(300 full-batch epochs), ``mb<B>`` (mini-batch ``B``, 20 epochs, constraint rows from
full-data snapshots: the mini-batch default ``constraint_batch="auto"``), ``mb<B>-batch``
(constraint rows estimated on the same mini-batch), ``mb<B>-full`` (constraints on all rows at
every step), ``mb<B>-bal<C>`` (balanced constraint batches of ``C`` rows), and for the
synthetic rows ``mb1024-mmap`` (the rows written to disk once by the parent process with
:func:`fairopt.data.save_memmap` and memory-mapped by the training process,
``StochasticSQP(chunk_rows=65536)`` for the full-data passes: the peak memory is then that
of the batches and chunks). Every mini-batch run ends with the engine's full-batch polish.

Peers (``--peers``, package ``humancompatible-train``, skipped with a message when absent),
same split, model and initialisation, 20 epochs of balanced batches of 1024 rows (its
``BalancedBatchSampler``, every group oversampled to the largest, inverse-propensity
weighted loss) and the smoothed rows ``delta p_1 - p_0 <= 0``, ``delta p_0 - p_1 <= 0`` with
``p_g`` the batch mean of ``sigmoid(logit / 0.1)`` per group (a sharp smoothed step, as in
the cooper peer of ``benchmarks/peers.py``): ``hct-ssl-alm`` (its ALM multipliers, quadratic
augmentation ``rho = 1``, dual step 0.05, with SGD (lr 0.05) inside its Moreau-envelope
smoothing, mu 2, beta 0.5: the smoothed linearised ALM) and ``hct-alm-adam`` (the same ALM
with Adam, lr 0.01). Fixed settings, not tuned per data set. They return their last
iterate; ``feasible`` is the exact DI on all training rows against ``delta``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import resource
import statistics
import sys
import time
import warnings
from pathlib import Path

from _common import DEFAULT_OUT, commit, data_dir

CONFIGS = {
    "full": {"epochs": 500},
    "full300": {"epochs": 300},
    "mb256": {"epochs": 20, "batch_size": 256},
    "mb1024": {"epochs": 20, "batch_size": 1024},
    "mb4096": {"epochs": 20, "batch_size": 4096},
    "mb1024-batch": {"epochs": 20, "batch_size": 1024, "constraint_batch": "batch"},
    "mb1024-full": {"epochs": 20, "batch_size": 1024, "constraint_batch": "full"},
    "mb256-bal1024": {"epochs": 20, "batch_size": 256, "constraint_batch": "balanced", "constraint_batch_size": 1024},
    "mb1024-bal1024": {"epochs": 20, "batch_size": 1024, "constraint_batch": "balanced",
                       "constraint_batch_size": 1024},
    # synthetic only: rows memory-mapped from disk, full-data passes in chunks
    "mb1024-mmap": {"epochs": 20, "batch_size": 1024, "chunk_rows": 65536},
}
#: Rows per chunk when predicting on memory-mapped rows.
PREDICT_CHUNK = 65536
MODELS = {"dutch": "mlp", "acsincome": "linear", "synthetic": "linear"}
#: humancompatible-train peers: primal optimiser (``ssl``: SGD in its Moreau envelope).
PEERS = {"hct-ssl-alm": "ssl", "hct-alm-adam": "adam"}
PEER_EPOCHS, PEER_BATCH, PEER_TEMPERATURE = 20, 1024, 0.1


def installed_peers(names: list[str] | None = None) -> list[str]:
    """``names`` (every key of :data:`PEERS` when None) when humancompatible-train imports, else none, with a
    message saying they are skipped and how to install it.

    Parameters
    ----------
    names : list of str, optional
        Keys of :data:`PEERS`.

    Returns
    -------
    list of str
    """
    try:
        import humancompatible.train  # noqa: F401
    except ImportError:
        print("skipping the humancompatible-train peers: pip install humancompatible-train", flush=True)
        return []
    return list(PEERS) if names is None else list(names)


def _synthetic(n: int, seed: int):
    """``n`` rows, 20 standard-normal inputs, a binary sensitive attribute correlated with
    the first input and a logistic target that depends on it (DI about 0.5)."""
    import numpy as np

    import fairopt

    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 20)).astype(np.float32)
    s = (X[:, 0] + rng.standard_normal(n) > 0).astype(np.int64)
    logit = X @ rng.standard_normal(20).astype(np.float32) * 0.5 + 1.0 * s - 0.5
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-logit))).astype(np.int64)
    return fairopt.FairData.from_arrays(X, y, {"sex": s}, task="binary",
                                        feature_names=[f"x{i}" for i in range(20)])


def grid_model(kind: str, n_features: int, seed: int):
    """The benchmarks' models: ``fairopt.models.mlp`` with one hidden layer of 32 units for "mlp", else
    ``fairopt.models.linear``, seeded by ``seed``."""
    import fairopt

    return (fairopt.models.mlp(n_features, hidden=(32,), seed=seed) if kind == "mlp"
            else fairopt.models.linear(n_features, seed=seed))


def run_one(dataset: str, config: str, seed: int, delta: float, data_root: str | None, n_synthetic: int,
            queue) -> None:
    """Fit one configuration (in a child process) and put its figures (or the error) on ``queue``."""
    try:
        queue.put(_fit_one(dataset, config, seed, delta, data_root, n_synthetic))
    except Exception as exc:  # the parent waits on the queue: never leave it empty
        queue.put({"dataset": dataset, "config": config, "seed": seed, "error": f"{type(exc).__name__}: {exc}"})


def _fit_one(dataset: str, config: str, seed: int, delta: float, data_root: str | None, n_synthetic: int) -> dict:
    import torch

    import fairopt
    from fairopt.constraints import DisparateImpact
    from fairopt.measures import disparate_impact
    from solvers import StochasticSQP

    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    if dataset == "synthetic" and config.endswith("-mmap"):
        from fairopt.data import load_memmap

        folder = _memmap_folder(n_synthetic, seed)
        train, test = load_memmap(folder / "train"), load_memmap(folder / "test")
    elif dataset == "synthetic":
        data = _synthetic(n_synthetic, seed)
        train, test = data.subset(torch.arange(int(0.7 * len(data)))), data.subset(
            torch.arange(int(0.7 * len(data)), len(data)))
    else:
        data = fairopt.datasets.load(dataset, data_dir=data_root)
        train, test = data.split(test_size=0.3, seed=seed)
    torch.manual_seed(seed)
    model = grid_model(MODELS[dataset], train.n_features, seed)
    sensitive = train.sensitive_names[0]
    constraint = DisparateImpact(sensitive, delta=delta, surrogate=fairopt.surrogates.Sigmoid(scale=1.0))
    trace: list = []
    start = time.perf_counter()

    def clock(engine, record):
        record["wall"] = time.perf_counter() - start
        trace.append((record["wall"], record.get("V_exact", float("nan")), record["f"], record.get("phase", "")))

    if config in PEERS:
        _fit_peer(PEERS[config], model, train, sensitive, delta, seed, clock)
        seconds = time.perf_counter() - start
        result = None
    else:
        engine = StochasticSQP(seed=seed, callbacks=[clock], **CONFIGS[config])
        result = engine.fit(model, train, loss="bce", constraints=[constraint])
        seconds = time.perf_counter() - start

    def measures(part):
        with torch.no_grad():  # in chunks: memory-mapped rows are never read whole
            pred = torch.cat([(model(part.X[i:i + PREDICT_CHUNK]) > 0).long()
                              for i in range(0, len(part), PREDICT_CHUNK)])
        return (float(disparate_impact(pred, part.sensitive[sensitive])),
                float((pred == part.y.long()).float().mean()))

    (train_di, train_acc), (test_di, test_acc) = measures(train), measures(test)
    return {"dataset": dataset, "config": config, "seed": seed, "n_train": len(train), "seconds": seconds,
               "train_di": train_di, "test_di": test_di, "train_acc": train_acc, "test_acc": test_acc,
               "feasible": bool(result.info["feasible"]) if result else train_di >= delta,
               "status": result.status if result else "last iterate",
               "restarts": result.info.get("restarts", 0) if result else 0,
               "iterations": result.info["iterations"] if result else len(trace),
               "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, "trace": trace}


def _fit_peer(primal: str, model, train, sensitive: str, delta: float, seed: int, clock,
              epochs: int = PEER_EPOCHS, batch_size: int = PEER_BATCH) -> None:
    """humancompatible-train's ALM on balanced batches (module docstring), in place on ``model``.
    Two groups: the rows ``delta p_1 - p_0``, ``delta p_0 - p_1``; more groups: each group against
    the rest of the batch (``delta p_rest - p_g``, ``delta p_g - p_rest``), fairopt's rows."""
    import torch
    from humancompatible.train.dual_optim import ALM, MoreauEnvelope
    from humancompatible.train.fairness.utils.balanced_batch_sampler import BalancedBatchSampler

    s = train.sensitive[sensitive].long()
    codes = torch.unique(s).tolist()
    groups = [torch.nonzero(s == g).reshape(-1).tolist() for g in codes]
    sampler = BalancedBatchSampler(group_indices=groups, batch_size=batch_size, extend_groups=True,
                                   generator=torch.Generator().manual_seed(seed))
    row_weight = sampler.group_weights.to(torch.float32)[torch.searchsorted(torch.tensor(codes), s)]
    params = list(model.parameters())
    primal_opt = (MoreauEnvelope(torch.optim.SGD(params, lr=0.05), mu=2.0, beta=0.5) if primal == "ssl"
                  else torch.optim.Adam(params, lr=0.01))
    dual = ALM(m=2 if len(codes) == 2 else 2 * len(codes), lr=0.05, penalty=1.0, is_ineq=True,
               augmentation="quadratic")
    X, y = train.X.float(), train.y.float()
    for _ in range(epochs):
        for batch in sampler:
            idx = torch.as_tensor(batch)
            logits = model(X[idx]).reshape(-1)
            loss = (torch.nn.functional.binary_cross_entropy_with_logits(logits, y[idx], reduction="none")
                    * row_weight[idx]).mean()
            rate = torch.sigmoid(logits / PEER_TEMPERATURE)
            g = s[idx]
            if len(codes) == 2:
                p0, p1 = rate[g == codes[0]].mean(), rate[g == codes[1]].mean()
                rows = torch.stack([delta * p1 - p0, delta * p0 - p1])
            else:
                pairs = [(rate[g == c].mean(), rate[g != c].mean()) for c in codes]
                rows = torch.stack([r for p_g, p_rest in pairs for r in (delta * p_rest - p_g, delta * p_g - p_rest)])
                rows = torch.nan_to_num(rows)  # a group the batch misses constrains nothing there
            primal_opt.zero_grad()
            dual.forward_update(loss, rows).backward()
            primal_opt.step()
            clock(None, {"V_exact": float(rows.detach().clamp(min=0).sum()), "f": float(loss.detach())})


def _memmap_folder(n: int, seed: int) -> Path:
    import tempfile

    return Path(tempfile.gettempdir()) / "fairopt_sqp_stochastic" / f"synthetic_n{n}_s{seed}"


def _prepare_memmap(n: int, seed: int) -> None:
    """Write the synthetic rows of ``seed`` (70/30 train/test) to disk once (in a process of
    its own) for the ``-mmap`` configuration."""
    import torch

    from fairopt.data import save_memmap

    folder = _memmap_folder(n, seed)
    if (folder / "train" / "meta.json").is_file() and (folder / "test" / "meta.json").is_file():
        return
    data = _synthetic(n, seed)
    cut = int(0.7 * len(data))
    save_memmap(data.subset(torch.arange(cut)), folder / "train")
    save_memmap(data.subset(torch.arange(cut, len(data))), folder / "test")


def run(dataset: str, config: str, seed: int, delta: float, data_root: str | None, n_synthetic: int) -> dict:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=run_one, args=(dataset, config, seed, delta, data_root, n_synthetic, queue))
    proc.start()
    record = queue.get()
    proc.join()
    return record


def plot(records: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_v, ax_f) = plt.subplots(1, 2, figsize=(11, 4))
    for r in records:
        t, V, f, _ = zip(*r["trace"]) if r["trace"] else ((), (), (), ())
        label = f"{r['config']} (seed {r['seed']})"
        ax_v.plot(t, [max(x, 1e-7) for x in V], label=label, linewidth=0.8)
        ax_f.plot(t, f, label=label, linewidth=0.8)
    ax_v.set_yscale("log")
    ax_v.set_xlabel("wall time (s)")
    ax_v.set_ylabel("exact violation on the constraint rows (1e-7 = met)")
    ax_f.set_xlabel("wall time (s)")
    ax_f.set_ylabel("training loss (batch)")
    ax_f.legend(fontsize=7)
    fig.suptitle(f"{records[0]['dataset']}: SQP, DI >= delta, full batch vs mini-batch")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _ratio_lines(records: list[dict], repeats: int) -> list[str]:
    """Per dataset and seed, each mini-batch configuration's (median) wall time over the full
    batch's (each full-batch configuration that ran: ``full``, ``full300``)."""
    lines = []
    for reference in ("full", "full300"):
        full = {(r["dataset"], r["seed"]): r["seconds"] for r in records if r["config"] == reference}
        for r in records:
            base = full.get((r["dataset"], r["seed"]))
            if not base or r["config"].startswith("full"):
                continue
            times = ", ".join(f"{x:.2f}" for x in r.get("seconds_all", [r["seconds"]]))
            lines.append(f"# {r['dataset']} seed {r['seed']}: {r['config']} / {reference} = {r['seconds'] / base:.2f}"
                         + (f" (median of {repeats} runs: {times} s)" if repeats > 1 else ""))
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", nargs="+", default=["dutch", "acsincome"],
                    help="data set names; with --grid also name:attribute for another sensitive column "
                         "(adult:race) or name:column>=value for two groups cut from a numeric one "
                         "(adult:age>=40; the grid's five by default)")
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--delta", type=float, default=0.8)
    ap.add_argument("--synthetic", type=int, default=0, help="also run n synthetic rows (mini-batch 1024 only)")
    ap.add_argument("--peers", action="store_true", help="also run the humancompatible-train peers (PEERS)")
    ap.add_argument("--data-dir")
    ap.add_argument("--out", default=str(DEFAULT_OUT / "sqp_stochastic"))
    ap.add_argument("--repeats", type=int, default=1,
                    help="runs of every job, round-robin; the median wall time is reported")
    ap.add_argument("--grid", action="store_true",
                    help="the accuracy grid: 5 data sets x linear/MLP 32 x batch 256/1024 x seeds 0-2, 10 epochs, "
                         "against 300 full-batch epochs (with --peers: humancompatible-train on the same cells)")
    ap.add_argument("--jobs", type=int, default=2, help="--grid: worker processes")
    ap.add_argument("--batches", nargs="+", type=int, help="--grid: the mini-batch sizes (default 256 1024)")
    ap.add_argument("--surrogate", help="--grid: fairopt's DisparateImpact surrogate as name[:scale] "
                                        "(sigmoid:1); its own default (the smoothed step) otherwise")
    ap.add_argument("--report-only", action="store_true",
                    help="render grid.md and grid.png again from the grid.json in --out (no runs)")
    ap.add_argument("--reuse-reference", action="store_true",
                    help="--grid: take the full-batch and peer runs from the grid.json already in --out (for a "
                         "change of the mini-batch path only; the header names the grid they come from)")
    ap.add_argument("--reuse-minibatch", action="store_true",
                    help="--grid: take fairopt's mini-batch runs and the peer runs from the grid.json already in "
                         "--out and run the full batch again (for a change of the full-batch path only)")
    ap.add_argument("--reuse-peers", action="store_true",
                    help="--grid: take the peer runs from the grid.json already in --out and run fairopt's full-batch "
                         "and mini-batch runs again (for a change of both, such as a default of the constraint)")
    ap.add_argument("--pool", nargs="+", metavar="DIR",
                    help="compare with the peers over the seeds of several grids (their grid.json; disjoint "
                         "seeds): per cell the paired differences with 95%% intervals, into --out/pooled.md")
    args = ap.parse_args(argv)
    if args.repeats < 1:
        ap.error("--repeats: expected a positive integer")
    root = str(data_dir(args.data_dir))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.pool:
        from sqp_grid_pooled import render_pooled

        return render_pooled([Path(p) for p in args.pool], out)
    if args.grid or args.report_only:
        from sqp_grid import render_grid, run_grid  # it imports this module (PEERS, _fit_peer)

        return render_grid(args, out) if args.report_only else run_grid(args, root, out)
    configs = list(args.configs)
    if args.peers:
        configs += installed_peers()
    jobs = [(d, c, s) for d in args.datasets for s in args.seeds for c in configs if not c.endswith("-mmap")]
    if args.synthetic:
        jobs += [("synthetic", c, s) for s in args.seeds for c in ("mb1024", "mb1024-mmap")]
        for s in args.seeds:  # in a child process: the parent's memory would show in every child's peak
            proc = mp.get_context("spawn").Process(target=_prepare_memmap, args=(args.synthetic, s))
            proc.start()
            proc.join()
    records = []
    header = (f"{'dataset':10s} {'config':15s} {'seed':>4s} {'n':>8s} {'seconds':>8s} {'trainDI':>8s} {'testDI':>7s} "
              f"{'trainAcc':>8s} {'testAcc':>7s} {'feasible':>8s} {'status':>15s} {'peakMB':>7s}")
    command = "python benchmarks/sqp_stochastic.py " + " ".join(sys.argv[1:] if argv is None else argv)
    setting = "# the sensitive attribute is not a model input (the loaders' default, include_sensitive=False)"
    lines = [f"# {command}", f"# commit {commit()}", setting, header]
    print(setting, flush=True)
    print(header, flush=True)
    runs: dict[tuple, list[dict]] = {job: [] for job in jobs}
    for repeat in range(args.repeats):
        for job in jobs:
            runs[job].append(run(*job, args.delta, root, args.synthetic))
            if args.repeats > 1:
                print(f"repeat {repeat + 1}/{args.repeats} {job}: {runs[job][-1].get('seconds', float('nan')):.2f} s",
                      flush=True)
    same = ("train_di", "test_di", "train_acc", "test_acc", "status", "iterations")
    for (dataset, config, seed), reps in runs.items():
        failed = next((r for r in reps if "error" in r), None)
        if failed is not None:
            lines.append(f"{dataset:10s} {config:15s} {seed:4d} failed: {failed['error']}")
            print(lines[-1], flush=True)
            continue
        r = reps[0]
        differ = [k for k in same if any(other[k] != r[k] for other in reps[1:])]
        if differ:  # said in the table: the figures are those of the first repetition
            lines.append(f"# {dataset} {config} seed {seed}: the repetitions differ in {', '.join(differ)}")
            print(lines[-1], flush=True)
        r["seconds_all"] = [other["seconds"] for other in reps]
        r["seconds"] = statistics.median(r["seconds_all"])
        records.append(r)
        lines.append(f"{r['dataset']:10s} {r['config']:15s} {r['seed']:4d} {r['n_train']:8d} {r['seconds']:8.2f} "
                     f"{r['train_di']:8.4f} {r['test_di']:7.4f} {r['train_acc']:8.4f} {r['test_acc']:7.4f} "
                     f"{str(r['feasible']):>8s} {r['status']:>15s} {r['peak_mb']:7.0f}")
        print(lines[-1], flush=True)
    ratios = _ratio_lines(records, args.repeats)
    lines += ratios
    print("\n".join(ratios), flush=True)
    for dataset in dict.fromkeys(r["dataset"] for r in records):
        plot([r for r in records if r["dataset"] == dataset], out / f"sqp_stochastic_{dataset}.png")
    (out / "sqp_stochastic.txt").write_text("\n".join(lines) + "\n")
    (out / "sqp_stochastic.json").write_text(json.dumps([{k: v for k, v in r.items() if k != "trace"}
                                                        for r in records], indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
