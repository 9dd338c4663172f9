"""The oracle's backward against torch's eager backward, model by model (make bench).

For each model of refgrad.zoo (ZOO and the mid-size MID_SIZE), in float32 and float64, at one thread and at
every core (torch.set_num_threads and refgrad.set_num_threads to the same count), interleaved round by round:
  torch     loss.backward() after a fresh forward (backward timed only)
  oracle    Capture.run("as_captured"): the captured program run by refgrad's Machine in the model's dtype
and, at one thread only,
  capture   refgrad.torch.capture(loss) after a fresh forward: walking the grad_fn graph, reading the saved
            tensors, functionalizing (what a check adds before the oracle runs).
Each line reports medians over the rounds and the ratios to torch's backward in the same run; absolute
times depend on the machine and its load, the ratios much less. A last column says whether the oracle's
grads at that thread count are the same bits as at one thread.

    .venv/bin/python bench/bench_models.py [--models mlp,cnn_mid] [--rounds 9]
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

import refgrad
import refgrad.torch as rt
from refgrad.zoo import MID_SIZE, ZOO

WARMUP = 2
# Seconds between torch's backward and the oracle's run: torch's OpenMP threads keep spinning for a while after
# a parallel region, and on a machine with few cores they would take the cores the oracle's threads run on.
SETTLE = 0.2
DTYPES = {"f32": torch.float32, "f64": torch.float64}


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def set_threads(threads: int) -> None:
    torch.set_num_threads(threads)
    refgrad.set_num_threads(threads)


def measure(make, dtype: torch.dtype, threads: int, rounds: int, with_capture: bool):
    """Median times (seconds) of torch's backward, the oracle's run and (with_capture) the capture, and the
    oracle's grads."""
    set_threads(threads)
    model, forward = make(dtype)
    names = dict(model.named_parameters())
    captured = rt.capture(forward(model), names=names)
    times: dict[str, list[float]] = {"torch": [], "oracle": [], "capture": []}
    for round_index in range(WARMUP + rounds):
        model.zero_grad(set_to_none=True)
        loss = forward(model)
        torch_time = timed(loss.backward)
        time.sleep(SETTLE)
        oracle_time = timed(lambda: captured.run("as_captured"))
        capture_time = timed(lambda: rt.capture(forward(model), names=names)) if with_capture else 0.0
        if round_index >= WARMUP:
            times["torch"].append(torch_time)
            times["oracle"].append(oracle_time)
            times["capture"].append(capture_time)
    grads = captured.run("as_captured")
    return {key: statistics.median(values) for key, values in times.items()}, grads, len(captured.program)


def same_bits(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        (a[k] is None and b[k] is None) or (a[k] is not None and b[k] is not None and torch.equal(a[k], b[k]))
        for k in a)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    models = {**ZOO, **MID_SIZE}
    parser.add_argument("--models", default=",".join(models), help="comma-separated names (default: all)")
    parser.add_argument("--rounds", type=int, default=9, help="timed rounds per measurement (default 9)")
    args = parser.parse_args()
    cores = refgrad.default_num_threads()
    print(f"refgrad {refgrad.__version__}, torch {torch.__version__}; {cores} cores; medians of {args.rounds} "
          f"rounds after {WARMUP} warm-up rounds; ratios are refgrad's time over torch's in the same run")
    print(f"{'model':<16} {'dtype':<5} {'threads':>7} {'instrs':>6} {'torch ms':>9} {'oracle ms':>9} "
          f"{'oracle/torch':>12} {'capture/torch':>13} {'same bits':>9}")
    worst = 0.0
    for name in args.models.split(","):
        make = models[name]
        for dtype_name, dtype in DTYPES.items():
            one_thread_grads = None
            for threads in sorted({1, cores}):
                median, grads, instructions = measure(make, dtype, threads, args.rounds, with_capture=threads == 1)
                if threads == 1:
                    one_thread_grads = grads
                ratio = median["oracle"] / median["torch"]
                worst = max(worst, ratio)
                capture = f"{median['capture'] / median['torch']:>13.2f}" if threads == 1 else f"{'':>13}"
                print(f"{name:<16} {dtype_name:<5} {threads:>7} {instructions:>6} {1e3 * median['torch']:>9.3f} "
                      f"{1e3 * median['oracle']:>9.3f} {ratio:>12.2f} {capture} "
                      f"{'yes' if same_bits(grads, one_thread_grads) else 'NO':>9}", flush=True)
    set_threads(cores)
    print(f"worst oracle/torch: {worst:.2f}")


if __name__ == "__main__":
    main()
