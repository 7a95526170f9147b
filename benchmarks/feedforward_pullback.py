"""The closed-form pullback of feed-forward networks (``solvers.feedforward``) against autograd,
on the CPU or a GPU: agreement first, then time.

    python benchmarks/feedforward_pullback.py                      # CPU, 48,336 rows, MLP 32
    python benchmarks/feedforward_pullback.py --device cuda --rows 1000000 --hidden 256 256

Agreement: for several networks (one and two hidden layers; Leaky ReLU, ReLU, tanh, sigmoid,
GELU - the last through the generic autograd derivative), in float32 and float64, the largest
relative difference between ``k`` gradient rows ``cot @ d out / d params`` computed in closed
form and by one autograd backward pass per row, and whether the traced outputs equal
``model(X)`` bit for bit.

Time (mean of ``--repeats`` after a warm-up, the device synchronised around each): one forward
pass with ``k`` gradient rows in closed form; the same through autograd (``k`` backward passes on
the retained graph, ``solvers.derivatives.pullback``); and one forward and backward pass of a
plain loss (what an Adam step computes), for scale.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from torch import nn

from solvers.derivatives import pullback
from solvers.feedforward import FeedForward

ACTIVATIONS = {"leaky_relu": lambda: nn.LeakyReLU(0.01), "relu": nn.ReLU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid,
               "gelu": nn.GELU}


def network(features: int, hidden: list[int], activation: str) -> nn.Sequential:
    layers: list[nn.Module] = []
    for n_in, n_out in zip([features] + hidden[:-1], hidden):
        layers += [nn.Linear(n_in, n_out), ACTIVATIONS[activation]()]
    return nn.Sequential(*layers, nn.Linear(hidden[-1], 1))


def agreement(device: torch.device, k: int) -> list[dict]:
    """Closed form against autograd on small batches, every network and dtype."""
    rows = []
    for dtype in (torch.float32, torch.float64):
        for hidden in ([16], [16, 8]):
            for activation in ACTIVATIONS:
                torch.manual_seed(0)
                model = network(12, hidden, activation).to(device=device, dtype=dtype)
                params = list(model.parameters())
                X = torch.randn(2000, 12, device=device, dtype=dtype)
                cot = torch.randn(k, 2000, device=device, dtype=dtype)
                trace = FeedForward.recognise(model, params).trace(X)
                reference = pullback(model(X).reshape(-1), params, cot, "loop")
                error = float((trace.pullback(cot) - reference).abs().max() / reference.abs().max())
                rows.append({"dtype": str(dtype).replace("torch.", ""), "hidden": hidden, "activation": activation,
                             "out_bit_equal": bool(torch.equal(trace.out, model(X).reshape(-1).detach())),
                             "max_rel_diff": error})
    return rows


def timed(fn, repeats: int, device: torch.device) -> float:
    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    fn()
    sync()
    t0 = time.perf_counter()
    for _ in range(repeats):
        fn()
    sync()
    return (time.perf_counter() - t0) / repeats


def timings(device: torch.device, rows: int, features: int, hidden: list[int], k: int, repeats: int) -> dict:
    torch.manual_seed(0)
    model = network(features, hidden, "leaky_relu").to(device)
    params = list(model.parameters())
    X = torch.randn(rows, features, device=device)
    y = (torch.rand(rows, device=device) < 0.5).float()
    cot = torch.randn(k, rows, device=device)
    net = FeedForward.recognise(model, params)

    def plain():
        loss = nn.functional.binary_cross_entropy_with_logits(model(X).reshape(-1), y)
        torch.autograd.grad(loss, params)

    return {"closed_form_ms": 1e3 * timed(lambda: net.trace(X).pullback(cot), repeats, device),
            "autograd_ms": 1e3 * timed(lambda: pullback(model(X).reshape(-1), params, cot, "loop"), repeats, device),
            "plain_forward_backward_ms": 1e3 * timed(plain, repeats, device)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ...")
    ap.add_argument("--rows", type=int, default=48336)
    ap.add_argument("--features", type=int, default=43)
    ap.add_argument("--hidden", type=int, nargs="+", default=[32])
    ap.add_argument("--cotangents", type=int, default=3, help="gradient rows k (objective + constraint rows)")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    result = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
              "torch": torch.__version__, "agreement": agreement(device, args.cotangents),
              "timing": {"rows": args.rows, "features": args.features, "hidden": args.hidden, "k": args.cotangents,
                         **timings(device, args.rows, args.features, args.hidden, args.cotangents, args.repeats)}}
    if args.json:
        print(json.dumps(result, indent=1))
        return
    print(f"device {result['device']}, torch {result['torch']}")
    print(f"{'dtype':8s} {'hidden':8s} {'activation':11s} {'out == model(X)':>16s} {'max rel diff':>13s}")
    for r in result["agreement"]:
        print(f"{r['dtype']:8s} {str(r['hidden']):8s} {r['activation']:11s} {str(r['out_bit_equal']):>16s} "
              f"{r['max_rel_diff']:13.2e}")
    t = result["timing"]
    print(f"{t['rows']} rows, {t['features']} features, hidden {t['hidden']}, k = {t['k']} gradient rows:")
    print(f"  forward + k rows, closed form   {t['closed_form_ms']:9.3f} ms")
    print(f"  forward + k rows, autograd      {t['autograd_ms']:9.3f} ms")
    print(f"  plain forward + backward        {t['plain_forward_backward_ms']:9.3f} ms")


if __name__ == "__main__":
    main()
