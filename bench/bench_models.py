"""The oracle's backward against torch's eager backward, model by model (make bench).

For each model of refgrad.zoo, in one run and interleaved round by round:
  torch     loss.backward() after a fresh forward (backward timed only)
  capture   refgrad.torch.capture(loss) after a fresh forward: walking the grad_fn
            graph, reading the saved tensors, functionalizing (what a check adds
            before the oracle runs)
  oracle    Capture.run(): the program run by refgrad's Machine, as captured
            (float32) and promoted to float64 (the reference precision)
Each line reports medians over the rounds and the ratios to torch's backward;
absolute times depend on the machine and its load, the ratios much less.
Both sides run on one thread.
"""
from __future__ import annotations

import statistics
import time

import torch

import refgrad.torch as rt
from refgrad.zoo import ZOO

WARMUP, ROUNDS = 2, 9


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def one_round(model, forward, names) -> dict[str, float]:
    model.zero_grad(set_to_none=True)
    loss = forward(model)
    times = {"torch": timed(lambda: loss.backward())}
    loss = forward(model)
    captured = None

    def do_capture():
        nonlocal captured
        captured = rt.capture(loss, names=names)

    times["capture"] = timed(do_capture)
    times["oracle f32"] = timed(lambda: captured.run("float32"))
    times["oracle f64"] = timed(lambda: captured.run("float64"))
    return times


def main() -> None:
    torch.set_num_threads(1)
    header = f"{'model':<12} {'instrs':>6} {'torch ms':>9} {'capture ms':>10} {'oracle f32 ms':>13} {'oracle f64 ms':>13}" \
             f" {'f32/torch':>9} {'f64/torch':>9} {'capture/torch':>13}"
    print(header)
    for name, make in ZOO.items():
        model, forward = make(torch.float32)
        names = dict(model.named_parameters())
        rounds = [one_round(model, forward, names) for _ in range(WARMUP + ROUNDS)][WARMUP:]
        median = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
        instructions = len(rt.capture(forward(model), names=names).program)
        ratio = {key: median[key] / median["torch"] for key in median}
        print(f"{name:<12} {instructions:>6} {1e3 * median['torch']:>9.3f} {1e3 * median['capture']:>10.3f}"
              f" {1e3 * median['oracle f32']:>13.3f} {1e3 * median['oracle f64']:>13.3f}"
              f" {ratio['oracle f32']:>9.2f} {ratio['oracle f64']:>9.2f} {ratio['capture']:>13.2f}")


if __name__ == "__main__":
    main()
