"""How far correct float32 engines land from R, in units of refgrad's own float32 error (docs/check.md,
"The rule, and why"): the measurement behind refgrad.check's NOISE_FACTOR.

For each zoo model (seeds 0 and 1) and a 12-layer tanh MLP, per gradient: R is refgrad's float64 run of the
captured program, R' its float32 run, eager torch's float32 backward, inductor torch.compile's. Prints the
largest ratios eager/R' and inductor/max(eager, R') of max|E - R| (the rule needs them under 32), and eager's
largest error in units of max|R| (large where a gradient is mathematically zero: a floor relative to max|R| fails).

    .venv/bin/python bench/noise.py
"""
import copy

import torch
from torch import nn

import refgrad.torch as refgrad_torch
from refgrad import zoo


def gradients(model, forward, backend=None):
    model = copy.deepcopy(model)
    if backend is None:
        loss = forward(model)
    else:
        torch._dynamo.reset()
        loss = torch.compile(forward, backend=backend)(model)
    loss.backward()
    return {name: parameter.grad for name, parameter in model.named_parameters()}


def measure(case, model, forward, rows):
    fresh = copy.deepcopy(model)
    capture = refgrad_torch.capture(forward(fresh), names=dict(fresh.named_parameters()))
    reference, as_captured = capture.run("float64"), capture.run("float32")
    eager, inductor = gradients(model, forward), gradients(model, forward, "inductor")
    for name, r in reference.items():
        def error(grad):
            return (grad.double() - r).abs().max().item()
        rows.append((case, name, error(eager[name]), error(as_captured[name]), error(inductor[name]),
                     r.abs().max().item()))


def deep_mlp(seed):
    torch.manual_seed(seed)
    model = nn.Sequential(*[layer for _ in range(12) for layer in (nn.Linear(16, 16), nn.Tanh())])
    x, target = torch.randn(8, 16), torch.randn(8, 16)
    return model, lambda m: nn.functional.mse_loss(m(x), target)


def main():
    rows = []
    for name, make in zoo.ZOO.items():
        for seed in (0, 1):
            measure(f"{name} (seed {seed})", *make(seed=seed), rows)
    measure("12-layer MLP", *deep_mlp(0), rows)
    tiny = 1e-300

    def worst(ratio, label):
        value, case, name = max((ratio(row), row[0], row[1]) for row in rows)
        print(f"{label:<34} {value:6.2f}  ({case}, {name})")

    print(f"{len(rows)} gradients")
    worst(lambda row: row[2] / max(row[3], tiny), "max eager / R' error")
    worst(lambda row: row[4] / max(row[2], row[3], tiny), "max inductor / max(eager, R') error")
    worst(lambda row: row[2] / max(row[5], tiny), "max eager error / max|R|")


if __name__ == "__main__":
    main()
