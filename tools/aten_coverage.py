#!/usr/bin/env python3
"""`make aten-coverage`: every ATen op in the backward graphs AOTAutograd makes (torch.compile, aot_eager's
graphs, or Inductor's after its decompositions) for the zoo, the transformers models of
tests/python/test_hf_zoo.py and the first sample of each autograd op of torch's OpInfo database, run by
refgrad against torch op by op (refgrad.aot.coverage). Prints a table: per op, its calls right / attempted;
then the ops refgrad lacks, ranked by the graphs they keep from running.

    tools/aten_coverage.py                                  # zoo, transformers, OpInfo; aot_eager's graphs
    tools/aten_coverage.py --sources zoo hf --decompositions inductor
    tools/aten_coverage.py --ops add mm --markdown build/aten_coverage.md
"""
from __future__ import annotations

import argparse
import fnmatch
import os
import sys
import time
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))

import torch  # noqa: E402

import refgrad.aot  # noqa: E402
import refgrad.zoo  # noqa: E402
from refgrad.aot.coverage import Coverage, measure  # noqa: E402


def record(source: str, run, decompositions, coverage: Coverage) -> None:
    """Compiles and runs one forward and backward (run(backend) does both) and measures its graphs."""
    torch._dynamo.reset()
    recorder = refgrad.aot.Recorder(decompositions=decompositions)
    try:
        run(recorder.backend)
    except Exception as error:  # noqa: BLE001 (torch.compile's own failures are not refgrad's to count)
        print(f"  {source}: torch.compile or its backward raised {type(error).__name__}; skipped", file=sys.stderr)
        return
    measure(source, recorder, coverage)


def zoo(decompositions, coverage: Coverage) -> None:
    for name, make in sorted(refgrad.zoo.ZOO.items()):
        for dtype in (torch.float32, torch.float64):
            model, forward = make(dtype=dtype)
            record(f"zoo:{name}:{str(dtype)[6:]}", lambda backend: forward(torch.compile(model, backend=backend))
                   .backward(), decompositions, coverage)


def transformers_models(decompositions, coverage: Coverage) -> None:
    from test_hf_zoo import MODELS
    for name, make in sorted(MODELS.items()):
        model, forward = make()
        record(f"hf:{name}", lambda backend: forward(torch.compile(model, backend=backend)).backward(),
               decompositions, coverage)


def opinfo(decompositions, coverage: Coverage, patterns: list[str]) -> None:
    from opinfo_samples import autograd_ops, differentiable_call, op_id, samples
    for op in autograd_ops():
        name = op_id(op)
        if patterns and not any(fnmatch.fnmatch(name, pattern) for pattern in patterns):
            continue
        if torch.float32 not in op.supported_backward_dtypes("cpu"):
            continue
        try:
            sample = next(samples(op, torch.float32))
            fn, inputs = differentiable_call(op, sample)
        except Exception:  # noqa: BLE001 (an op without a float32 sample)
            continue
        if not inputs:
            continue

        def run(backend, fn=fn, inputs=inputs):
            outputs = torch.compile(fn, backend=backend)(*inputs)
            outputs = outputs if isinstance(outputs, (tuple, list)) else [outputs]
            loss = sum((o.abs() if o.is_complex() else o).sum() for o in outputs
                       if isinstance(o, torch.Tensor) and o.requires_grad)
            loss.backward()

        record(f"opinfo:{name}", run, decompositions, coverage)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sources", nargs="+", default=["zoo", "hf", "opinfo"], choices=["zoo", "hf", "opinfo"])
    parser.add_argument("--decompositions", choices=["none", "inductor"], default="none",
                        help="the graphs aot_eager gets (none) or Inductor gets, after its decompositions")
    parser.add_argument("--ops", nargs="*", default=[], help="OpInfo ops to run (fnmatch patterns)")
    parser.add_argument("--markdown", help="also write the table to this file")
    arguments = parser.parse_args()
    warnings.filterwarnings("ignore")
    decompositions = None if arguments.decompositions == "none" else arguments.decompositions
    coverage = Coverage()
    start = time.monotonic()
    if "zoo" in arguments.sources:
        zoo(decompositions, coverage)
    if "hf" in arguments.sources:
        transformers_models(decompositions, coverage)
    if "opinfo" in arguments.sources:
        opinfo(decompositions, coverage, arguments.ops)
    table = coverage.table()
    header = (f"ATen coverage: sources {', '.join(arguments.sources)}; graphs as "
              f"{'aot_eager' if decompositions is None else 'Inductor'} gets them "
              f"({time.monotonic() - start:.0f} s)")
    print(header + "\n\n" + table)
    if arguments.markdown:
        with open(arguments.markdown, "w") as out:
            out.write(header + "\n\n" + table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
