"""Seconds per full-batch SQP iteration, split into forward, Jacobian and QP, against one
plain Adam step on the same model and data, measured side by side in one run.

    python benchmarks/sqp_speed.py                       # Dutch, MLP 32, DI (2 rows)
    python benchmarks/sqp_speed.py --dataset law --model linear --rows 4
    python benchmarks/sqp_speed.py --constraint gedi      # GeDI (degree 1) vs Adam + GeDI penalty
    python benchmarks/sqp_speed.py --constraint dcov --max-rows 8000

With ``--constraint gedi`` or ``dcov`` the Adam reference is a step on the loss plus a
penalty of the same measure on the same batch (``fairopt.penalties.GeDIPenalty``,
``DistanceCovariancePenalty``): the cost of the measure's own gradient is in both.

Also times the Jacobian strategies: the stratified pullback (the default for rate rows
and a row-wise model: two backward passes per iteration, ``solvers.strata``), m+1 retained
backward calls ("loop") with row screening on and off (``screen_rows``: Jacobian rows of
constraint rows far inside their bounds are skipped; "rows skipped" is their mean number per
iteration) and one batched VJP; and a 500-epoch full-batch run. Prints a table (and --json).

On a shared machine the time of one step drifts by tens of per cent within a minute, so the
Adam step and the default SQP iteration are timed ``--repeats`` times in alternation (Adam,
then SQP, then Adam again, ...): the table gives the median of each and the median of the
paired ratios (one ratio per repetition, both halves measured seconds apart). "total ms" is
the steady-state time of one SQP iteration (every step's derivatives, QP, bookkeeping and
history record; :func:`sqp_iteration_seconds`), "fit ms/iter" the whole ``fit`` call (set-up,
the first iteration's Lipschitz probe and the closing evaluation included) per iteration.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from fairopt import datasets, models
from fairopt.constraints import DisparateImpact, DistanceCovariance, EqualImpact, GeDI
from fairopt.penalties import DistanceCovariancePenalty, GeDIPenalty
from solvers import StochasticSQP

from _common import data_dir


#: (name, jacobian strategy, row screening) of the timed SQP variants; the default engine is the first
#: ("auto": stratified for rate rows, else "loop, screened").
VARIANTS = (("default (auto)", "auto", True), ("loop, screened", "loop", True), ("loop, all rows", "loop", False),
            ("batched, all rows", "batched", False))


def per_call(fn, repeats: int) -> float:
    fn()  # warm-up
    t0 = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - t0) / repeats


def adam_step_seconds(model, data, repeats: int, penalty=None) -> float:
    """One Adam step on the BCE loss (plus ``penalty(out, data)`` when given)."""
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step():
        opt.zero_grad(set_to_none=True)
        out = model(data.X).reshape(-1)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(out, data.y)
        if penalty is not None:
            loss = loss + penalty(out, data)
        loss.backward()
        opt.step()

    return per_call(step, repeats)


def sqp_iteration_seconds(model, data, constraints, jacobian: str, iterations: int, screen: bool) -> dict:
    """Seconds per SQP iteration: ``total`` in the steady state (the mean gap between the end of
    iteration 1 and the end of the last training iteration, taken by a callback: every step's
    derivatives, QP, bookkeeping and history record, but not the set-up, the first iteration's
    Lipschitz probe or the closing evaluation - as the Adam step is timed after a warm-up), and
    ``fit`` (the whole ``fit`` call divided by the iterations taken, polish included)."""
    stamps: list[float] = []
    engine = StochasticSQP(epochs=iterations, jacobian=jacobian, lr_schedule=False, screen_rows=screen,
                           callbacks=[lambda eng, record: stamps.append(time.perf_counter())])
    t0 = time.perf_counter()
    res = engine.fit(model, data, loss="bce", constraints=constraints)
    history = res.history.to_pandas()
    fit = (time.perf_counter() - t0) / max(len(history) - 1, 1)
    training = stamps[:iterations]  # the training phase (a run that ends outside the bound adds polish steps)
    total = (training[-1] - training[0]) / max(len(training) - 1, 1)
    df = history.iloc[1:-1]  # drop the first (warm-up) iteration and the closing record
    return {"total": total, "fit": fit, "forward": df.t_forward.mean(), "jacobian": df.t_jacobian.mean(),
            "qp": df.t_qp.mean(), "screened": df.screened.mean() if "screened" in df else 0.0}


def constraint_and_penalty(kind: str, s: str, rows: int, train):
    """A factory of fresh constraint lists and, for GeDI / dCov, the penalty of the same measure."""
    if kind == "di":
        return (lambda: [DisparateImpact(s, 0.8)] + ([EqualImpact(s, 0.8)] if rows == 4 else [])), None
    if kind == "gedi":
        penalty = GeDIPenalty(s)
        make = lambda: [GeDI(s, bound=0.01)]
    else:
        penalty = DistanceCovariancePenalty(s, kind="dcov")
        make = lambda: [DistanceCovariance(s, bound=1e-4, kind="dcov")]
    penalty.setup(train)
    return make, penalty


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default="dutch")
    ap.add_argument("--model", default="mlp", choices=["mlp", "linear"])
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--rows", type=int, default=2, choices=[2, 4], help="2: DI; 4: DI + EI")
    ap.add_argument("--constraint", default="di", choices=["di", "gedi", "dcov"],
                    help="di: rate rows (--rows); gedi / dcov: one GeDI / distance-covariance bound, "
                         "against Adam with the same measure as a penalty")
    ap.add_argument("--max-rows", type=int, help="seeded subsample of the training rows")
    ap.add_argument("--iterations", type=int, default=60)
    ap.add_argument("--repeats", type=int, default=3,
                    help="alternating Adam / default-SQP timings; medians reported (the other variants run once)")
    ap.add_argument("--full-epochs", type=int, default=500, help="also time a full run (0 to skip)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--data-dir")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    data = datasets.load(args.dataset, data_dir=data_dir(args.data_dir))
    train, _ = data.split(test_size=0.2, seed=0)
    if args.max_rows and args.max_rows < len(train):
        train = train.subset(torch.randperm(len(train), generator=torch.Generator().manual_seed(0))[:args.max_rows])
    s = train.sensitive_names[0]
    make = (lambda: models.mlp(train.n_features, hidden=(args.hidden,), seed=0)) if args.model == "mlp" \
        else (lambda: models.linear(train.n_features, seed=0))
    cons, penalty = constraint_and_penalty(args.constraint, s, args.rows, train)
    default_name, default_jac, default_screen = VARIANTS[0]
    adams, defaults = [], []
    for _ in range(max(args.repeats, 1)):  # alternate: each ratio pairs timings taken seconds apart
        adams.append(adam_step_seconds(make(), train, args.iterations, penalty))
        defaults.append(sqp_iteration_seconds(make(), train, cons(), default_jac, args.iterations, default_screen))
    ratios = [d["total"] / a for d, a in zip(defaults, adams)]
    order = sorted(range(len(ratios)), key=ratios.__getitem__)
    adam = statistics.median(adams)
    rows = {"adam_step_ms": 1e3 * adam, "repeats": len(adams), "ratios": ratios}
    for name, jac, screen in VARIANTS:
        if name == default_name:  # the repetition with the median ratio
            t, ratio = defaults[order[len(order) // 2]], statistics.median(ratios)
        else:
            t = sqp_iteration_seconds(make(), train, cons(), jac, args.iterations, screen)
            ratio = t["total"] / adam
        rows[name] = {k: (v if k == "screened" else 1e3 * v) for k, v in t.items()} | {"ratio_to_adam": ratio}
    if args.full_epochs:
        t0 = time.perf_counter()
        StochasticSQP(epochs=args.full_epochs).fit(make(), train, loss="bce", constraints=cons())
        rows["full_run_seconds"] = time.perf_counter() - t0
        rows["full_run_epochs"] = args.full_epochs

    n_params = sum(p.numel() for p in make().parameters())
    what = f"constraint rows={args.rows}" if args.constraint == "di" else f"constraint={args.constraint} (Adam + its penalty)"
    header = (f"{args.dataset}: n={len(train)}, model={args.model}{'' if args.model == 'linear' else args.hidden}, "
              f"params={n_params}, {what}, torch threads={torch.get_num_threads()}")
    if args.json:
        print(json.dumps({"setting": header, **rows}, indent=1))
        return
    print(header)
    print(f"{'':30s}{'total ms':>10s}{'forward':>10s}{'jacobian':>10s}{'qp':>10s}{'x Adam':>9s}{'rows skipped':>14s}"
          f"{'fit ms/iter':>13s}")
    print(f"{'Adam step (median)':30s}{rows['adam_step_ms']:10.2f}")
    for name, _, _ in VARIANTS:
        r = rows[name]
        print(f"{'SQP iter (' + name + ')':30s}{r['total']:10.2f}{r['forward']:10.2f}{r['jacobian']:10.2f}{r['qp']:10.2f}"
              f"{r['ratio_to_adam']:9.2f}{r['screened']:14.2f}{r['fit']:13.2f}")
    print(f"default engine / Adam, paired ratios of {len(ratios)} alternating repetitions: "
          + ", ".join(f"{r:.2f}" for r in ratios) + f" (median {statistics.median(ratios):.2f})")
    if args.full_epochs:
        print(f"{args.full_epochs} full-batch SQP epochs (default engine): {rows['full_run_seconds']:.1f} s")


if __name__ == "__main__":
    main()
