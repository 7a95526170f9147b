"""Data-parallel full-batch SQP (solvers/distributed.py): iterations per second and parameter
agreement with the single-process engine, for 1, 2 and 4 ranks on one machine.

    python benchmarks/sqp_distributed.py                   # Dutch, MLP 32, DI >= 0.8, 50 its
    python benchmarks/sqp_distributed.py --ranks 1 2 --iterations 20
    python benchmarks/sqp_distributed.py --float64          # agreement without float32 noise

Each setting spawns its ranks with ``torch.multiprocessing`` (gloo over loopback, one torch
thread per rank); every rank loads the data, takes its contiguous shard of the 80% training
split and runs ``StochasticSQP`` (data-parallel automatically, since the process group is
initialised). The reference is the plain single-process engine on the whole training split,
also with one thread. Reported: iterations per second of the fit (slowest rank), mean
forward and Jacobian-plus-all-reduce milliseconds per iteration (rank 0), the largest
parameter difference from the reference after the run, and whether all ranks ended with
bit-identical parameters. The data-parallel engine sums the constraint terms in float64 while
the single-process engine evaluates them in the model's dtype (float32 by default), so with a
float32 model the two trajectories drift apart by float32 rounding amplified over the
iterations; ``--float64`` runs the model in float64 and isolates the algorithmic agreement.
On a machine with fewer cores than ranks the ranks oversubscribe
the CPU and the timings say so. Writes ``results/sqp_distributed[_float64].{csv,json}``.
"""

from __future__ import annotations

import argparse
import datetime
import socket
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from fairopt import datasets, models
from fairopt.constraints import DisparateImpact
from solvers import StochasticSQP

from _common import data_dir, markdown, out_dir, write_table


def load_train(directory: str):
    data = datasets.load("dutch", data_dir=directory)
    train, _ = data.split(test_size=0.2, seed=0)
    return train


class Float64(torch.nn.Module):
    """``inner`` in float64 on float64 copies of the (float32) inputs."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner.double()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x.double())


def run_fit(train, hidden: int, iterations: int, float64: bool) -> dict:
    """Fit and time one run on ``train`` (a shard under a process group, else all rows)."""
    model = models.mlp(train.n_features, hidden=(hidden,), seed=0)
    model = Float64(model) if float64 else model
    constraints = [DisparateImpact(train.sensitive_names[0], delta=0.8)]
    engine = StochasticSQP(epochs=iterations, lr_schedule=False)
    t0 = time.perf_counter()
    result = engine.fit(model, train, loss="bce", constraints=constraints)
    seconds = time.perf_counter() - t0
    frame = result.history.to_pandas()
    return {
        "params": torch.cat([p.detach().reshape(-1) for p in model.parameters()]),
        "seconds": seconds,
        "forward_ms": 1e3 * float(frame.t_forward.mean()),
        "jacobian_ms": 1e3 * float(frame.t_jacobian.mean()),
        "qp_ms": 1e3 * float(frame.t_qp.mean()),
        "f": float(frame.f.iloc[-1]),
    }


def rank_main(rank: int, world: int, port: int, directory: str, hidden: int, iterations: int, float64: bool,
              out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=300))
    try:
        train = load_train(directory)
        shard = train.subset(torch.arange(len(train)).tensor_split(world)[rank])
        dist.barrier()  # start the clocks together, after every rank has loaded the data
        torch.save(run_fit(shard, hidden, iterations, float64), Path(out) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(world: int, directory: str, hidden: int, iterations: int, float64: bool) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        mp.start_processes(rank_main, args=(world, free_port(), directory, hidden, iterations, float64, tmp),
                           nprocs=world, join=True, start_method="spawn")
        return [torch.load(Path(tmp) / f"rank{r}.pt", weights_only=True) for r in range(world)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--iterations", type=int, default=50)
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--float64", action="store_true", help="run the model in float64")
    ap.add_argument("--data-dir")
    ap.add_argument("--out")
    args = ap.parse_args()
    directory = str(data_dir(args.data_dir))

    torch.set_num_threads(1)
    train = load_train(directory)
    reference = run_fit(train, args.hidden, args.iterations, args.float64)
    rows = [{"ranks": "single process", "it_per_s": args.iterations / reference["seconds"],
             "forward_ms": reference["forward_ms"], "jacobian_ms": reference["jacobian_ms"],
             "qp_ms": reference["qp_ms"], "max_abs_param_diff": 0.0, "diff_vs_1_rank": float("nan"),
             "ranks_identical": True}]
    one_rank = None
    for world in args.ranks:
        results = run_ranks(world, directory, args.hidden, args.iterations, args.float64)
        one_rank = results[0]["params"] if world == 1 else one_rank
        rows.append({
            "ranks": world,
            "it_per_s": args.iterations / max(r["seconds"] for r in results),
            "forward_ms": results[0]["forward_ms"],
            "jacobian_ms": results[0]["jacobian_ms"],  # includes the all-reduce
            "qp_ms": results[0]["qp_ms"],
            "max_abs_param_diff": float((results[0]["params"] - reference["params"]).abs().max()),
            "diff_vs_1_rank": float("nan") if one_rank is None else float((results[0]["params"] - one_rank).abs().max()),
            "ranks_identical": all(torch.equal(r["params"], results[0]["params"]) for r in results),
        })
    n_params = reference["params"].numel()
    print(f"dutch train n={len(train)}, MLP {args.hidden} ({n_params} params, "
          f"{'float64' if args.float64 else 'float32'}), DI >= 0.8, "
          f"{args.iterations} full-batch iterations, 1 torch thread per rank, gloo loopback")
    stem = "sqp_distributed_float64" if args.float64 else "sqp_distributed"
    print(markdown(write_table(rows, out_dir(args.out), stem), floatfmt=".3g"))


if __name__ == "__main__":
    main()
