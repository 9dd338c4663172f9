"""How far torch.compile (Inductor) lands from R in units of the forward's own rounding F (docs/check.md, "an
engine that compiles the forward too"): the measurement behind refgrad.check's FORWARD_FACTOR.

For each refgrad.fuzz case (generator version 3; default: the ones whose forward rounding showed under
torch_compile), per gradient that torch_compile fails without the allowance: max|E - R|, the spread
max|eager - G| (where the limit keeps it), the sensitivity, and max|E - R| over each. The rule needs the
ratios under FORWARD_FACTOR (16) for correct engines; a real bug (avg_pool2d's ceil_mode, say) is far over it.

    .venv/bin/python bench/forward_rounding.py [SEED ...]
"""
import math
import sys

import torch

from refgrad.check.forward_rounding import _forward_sensitivity, unit_roundoff
from refgrad.check.oracle import _Oracle
from refgrad.check.rule import _Rule, _compare, _max_abs, _max_magnitude
from refgrad.check.subject import _Subject
from refgrad.engines import Eager, TorchCompile, differentiate
from refgrad.fuzz import generate
from refgrad.fuzz.program import load

SEEDS = [200069, 200450, 200502, 200534, 200588]


def main(seeds: list[int]) -> None:
    print("seed    gradient  max|E-R|  spread    sensitivity  /spread   /sensitivity  (spread: nan over its limit)")
    for seed in seeds:
        loaded = load(generate(seed))
        subject = _Subject(loaded.program, loaded.make_inputs(), False, loaded.check_inputs)
        oracle = _Oracle(subject, "float64")
        eager = Eager().gradients(lambda transform=None: subject.forward(transform), oracle.grad_outputs)
        compiled = TorchCompile().gradients(lambda transform=None: subject.forward(transform), oracle.grad_outputs)
        grad_outputs = [g.double() if g.is_floating_point() else g for g in oracle.grad_outputs]
        exact = differentiate(subject.forward(dtype=torch.float64), grad_outputs)
        sensitivity = _forward_sensitivity(subject, grad_outputs, exact, oracle.computes_in)
        for name, reference in oracle.grads.items():
            eager_error = _max_abs(eager[name], reference)
            plain = _compare(compiled[name], reference, oracle.dtypes[name], _Rule(), eager_error, False,
                             oracle.noise.get(name), eager[name], oracle.in_dtype.get(name))
            if plain.passed:
                continue
            spread = _max_abs(eager[name], exact[name])
            if spread > math.sqrt(unit_roundoff(oracle.computes_in)) * _max_magnitude(reference):
                spread = math.nan  # forward_allowance leaves it out
            error, moved = plain.max_abs, sensitivity.get(name, 0.0)
            print(f"{seed:<7} {name:<9} {error:<9.3g} {spread:<9.3g} {moved:<12.3g} {error / spread:<9.3g} "
                  f"{error / moved if moved else math.inf:.3g}")


if __name__ == "__main__":
    main([int(seed) for seed in sys.argv[1:]] or SEEDS)
