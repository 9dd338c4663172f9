"""The minimizer: delta debugging over a generated program, keeping the finding's bug.

    from refgrad.fuzz.minimize import minimize
    small, log = minimize(program, ["eager", "compiled_autograd:aot_eager"],
                          bug=("compiled_autograd", "wrong_gradient", "MulBackward0"))

A candidate is kept when it is a valid program (it runs forward and backward in eager) and checking it
finds the same bug: the finding's (engine, kind, where) — its signature less the op set, which shrinks
as ops go. The steps, each tried until none helps:

1. dtypes: a program under autocast tried in float64 without it, a float32 one in float64; a program
   that asks for torch.autograd.grad over some leaves (Program.inputs) tried with a backward into every
   leaf instead;
2. outputs: each output but the last dropped; then each leaf of torch.autograd.grad's inputs but one;
3. ops (ddmin): chunks of ops, halving down to single ones, each replaced by leaves (an op that defines a
   variable becomes a leaf of the same name, shape and dtype, so that no other op changes; a hook or
   retain_grad just goes); what no output needs any more is pruned, and torch.autograd.grad's inputs with
   it (Program.pruned keeps those left; a candidate left with none is not valid: run_eager refuses it);
4. ops bypassed, last first: an op's output replaced by its input of the same shape and dtype (the ops
   between the bug's node and the outputs, which step 3 would cut off from it);
   steps 2 to 4 repeat while they shrink the program;
5. shapes: each leaf whose values the remaining program allows made smaller (its shape's dims halved),
   tried one leaf at a time; ops whose shapes no longer fit fail to run, and the candidate is dropped.

Only the engine the finding names (and eager, the rule's baseline) run while minimizing. A worker crash
or a hang is not minimized here (it would take the minimizer down): rerun its case.py instead.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import time
from dataclasses import replace
from typing import Any, Callable, Optional, Sequence

import torch

from refgrad.fuzz.program import Leaf, Op, Program, load, run_eager

Bug = tuple[str, str, str]


def infer(program: Program) -> Program:
    """The program with each op's output shape and dtype read from running it (what they are after a
    change of dtype, say). Raises what torch raises when the program is not valid."""
    scope: dict[str, Any] = {"torch": torch, "F": torch.nn.functional}
    loaded = load(program)
    exec(compile(loaded.source.split("\ndef program(")[0], "<helpers>", "exec"), scope)  # helpers, leaf()
    for leaf, value in zip(program.leaves, loaded.make_inputs()):
        scope[leaf.name] = value
    ops = []
    for op in program.ops:
        if program.autocast:
            with torch.autocast("cpu", dtype=getattr(torch, program.autocast)):
                for line in op.lines:
                    exec(line, scope)
        else:
            for line in op.lines:
                exec(line, scope)
        if op.out is not None:
            value = scope[op.out]
            op = replace(op, shape=tuple(value.shape), dtype=str(value.dtype).replace("torch.", ""))
        ops.append(op)
    return replace(program, ops=tuple(ops))


def without(program: Program, indices: Sequence[int]) -> Program:
    """The program with the ops at ``indices`` replaced by leaves (see Program.replaced_by_leaf), pruned."""
    drop = set(indices)
    leaves = list(program.leaves)
    for index in sorted(drop):
        op = program.ops[index]
        if op.out is not None:
            leaves.append(Leaf(op.out, op.shape, 1000 + index, None if op.dtype == program.dtype else op.dtype))
    ops = tuple(op for i, op in enumerate(program.ops) if i not in drop)
    return replace(program, ops=ops, leaves=tuple(leaves)).pruned()


def bypassed(program: Program, index: int) -> Optional[Program]:
    """The program without op ``index``, its output replaced everywhere by the op's first input of the
    same shape and dtype (``y = gelu(x)`` gone, x read where y was): how ops after the bug's node go,
    which replacing them by leaves would cut off from it. None when no input fits."""
    op = program.ops[index]
    if op.out is None:
        return None
    kinds = {leaf.name: (leaf.shape, leaf.dtype or program.dtype) for leaf in program.leaves}
    kinds.update({o.out: (o.shape, o.dtype) for o in program.ops if o.out is not None})
    source = next((name for name in op.uses if kinds.get(name) == (op.shape, op.dtype)), None)
    if source is None:
        return None
    pattern = re.compile(rf"\b{re.escape(op.out)}\b")
    ops = []
    for later in program.ops[:index] + program.ops[index + 1:]:
        if op.out in later.uses:
            later = replace(later, lines=tuple(pattern.sub(source, line) for line in later.lines),
                            uses=tuple(dict.fromkeys(source if name == op.out else name for name in later.uses)))
        ops.append(later)
    outputs = tuple(dict.fromkeys(source if name == op.out else name for name in program.outputs))
    return replace(program, ops=tuple(ops), outputs=outputs).pruned()


def _smaller_leaf(program: Program, index: int) -> Optional[Program]:
    leaf = program.leaves[index]
    shape = tuple(max(1, size // 2) for size in leaf.shape)
    if shape == leaf.shape:
        return None
    leaves = list(program.leaves)
    leaves[index] = replace(leaf, shape=shape)
    return replace(program, leaves=tuple(leaves))


def minimize(program: Program, engines: Sequence[Any], bug: Bug, seconds: float = 300.0,
             reproduces: Optional[Callable[[Program], bool]] = None) -> tuple[Program, list[str]]:
    """The smallest program found within ``seconds`` that still finds ``bug``, and a log of the steps
    kept. ``reproduces`` replaces the check (a test's own predicate, say)."""
    from refgrad.fuzz.case import run_case

    deadline = time.monotonic() + seconds
    log: list[str] = []

    def finds_bug(candidate: Program) -> bool:
        if not any(op.out is not None for op in candidate.ops):
            return False  # outputs that are leaves: no program left (torch.compile has nothing to compile, ...)
        try:
            candidate = infer(candidate)
            run_eager(candidate)
        except Exception:
            return False  # not a valid program
        if reproduces is not None:
            return reproduces(candidate)
        result = run_case(candidate, engines, repeat=bug[1] == "nondeterministic")
        return any(finding.bug == bug for finding in result.findings)

    def attempt(candidate: Optional[Program], what: str) -> bool:
        nonlocal program
        if candidate is None or candidate == program or time.monotonic() > deadline:
            return False
        if finds_bug(candidate):
            program = infer(candidate)
            log.append(f"{what}: {len(program.ops)} ops, {len(program.leaves)} leaves")
            return True
        return False

    program = infer(program)
    original = len(program.ops)
    if program.autocast:
        attempt(replace(program, autocast=None, dtype="float64"), "float64 without autocast") or \
            attempt(replace(program, autocast=None), f"{program.dtype} without autocast")
    elif program.dtype == "float32":
        attempt(replace(program, dtype="float64"), "float64")
    if program.inputs is not None:
        attempt(replace(program, inputs=None), "a backward into every leaf instead of torch.autograd.grad")
    size = None
    while size != (len(program.ops), len(program.outputs)) and time.monotonic() < deadline:
        size = (len(program.ops), len(program.outputs))
        for output in list(program.outputs):
            if len(program.outputs) > 1:
                attempt(replace(program, outputs=tuple(o for o in program.outputs if o != output)).pruned(),
                        f"output {output} dropped")
        for name in list(program.inputs or ()):
            if program.inputs is not None and len(program.inputs) > 1:
                attempt(replace(program, inputs=tuple(i for i in program.inputs if i != name)),
                        f"{name} dropped from torch.autograd.grad's inputs")
        chunk = max(1, len(program.ops) // 2)
        while chunk >= 1 and time.monotonic() < deadline:
            start, changed = 0, False
            while start < len(program.ops) and time.monotonic() < deadline:
                indices = list(range(start, min(start + chunk, len(program.ops))))
                names = ", ".join(program.ops[i].kind for i in indices)
                if attempt(without(program, indices), f"dropped {names}"):
                    changed = True  # the ops after the dropped ones moved down: try the same start again
                else:
                    start += chunk
            if not changed:
                chunk //= 2
        index = len(program.ops) - 1
        while index >= 0 and time.monotonic() < deadline:
            if index < len(program.ops):
                attempt(bypassed(program, index), f"bypassed {program.ops[index].kind}")
            index -= 1
    progress = True
    while progress and time.monotonic() < deadline:
        progress = False
        for index in range(len(program.leaves)):
            if index < len(program.leaves) and attempt(_smaller_leaf(program, index),
                                                       f"leaf {program.leaves[index].name} smaller"):
                progress = True
    note = (f"minimized from case {program.seed} ({original} ops to {len(program.ops)}), keeping "
            f"{bug[1]} of {bug[0]} at {bug[2]}")
    return replace(program, note=note), log


def _spec_for(engine: str, specs: Sequence[str]) -> list[str]:
    """The engine specs to minimize with: eager, and the spec whose engine is named ``engine``."""
    from refgrad.fuzz.case import engine_name
    chosen = ["eager"]
    for spec in specs:
        if spec != "eager" and engine_name(spec) == engine:
            chosen.append(spec)
    return chosen


def minimize_finding(folder: str, engines: Optional[Sequence[str]] = None, seconds: float = 300.0) -> str:
    """Minimizes the finding in ``folder`` (a findings directory's subfolder): regenerates its case from
    the seed, minimizes it, and writes minimized.py (torch only), minimized.txt (refgrad.check's report of
    it, and the minimizer's log) and minimized.safetensors (refgrad's reproducer, when check wrote one).
    Returns one line that says what it did."""
    from refgrad.fuzz.case import run_case
    from refgrad.fuzz.generator import GENERATOR_VERSION, generate

    with open(os.path.join(folder, "summary.json")) as f:
        summary = json.load(f)
    if summary["kind"] in ("worker_crashed", "timeout"):
        return f"{folder}: a {summary['kind']} is not minimized in process; run its case.py"
    if summary["generator_version"] != GENERATOR_VERSION:
        return (f"{folder}: found by generator version {summary['generator_version']}, this is version "
                f"{GENERATOR_VERSION}: its seed makes another program now")
    specs = _spec_for(summary["engine"], engines or summary.get("engine_specs") or summary["engines"])
    program = generate(summary["seed"], max_ops=summary.get("max_ops", 16))
    bug = (summary["engine"], summary["kind"], summary["where"])
    small, log = minimize(program, specs, bug, seconds=seconds)
    shown = specs[-1] if len(specs) > 1 and not specs[-1].startswith("py:") else "compiled_autograd:aot_eager"
    with open(os.path.join(folder, "minimized.py"), "w") as f:
        f.write(small.source(shown))
    work = os.path.join(folder, ".minimized-bundle")
    result = run_case(small, specs, reproducer_dir=work, repeat=bug[1] == "nondeterministic")
    report = result.report
    bundle = result.reproducers.get(bug[0])
    if bundle:
        kept = os.path.join(folder, "minimized.safetensors")
        shutil.copy(bundle, kept)
        report = report.replace(bundle, kept)
    shutil.rmtree(work, ignore_errors=True)
    with open(os.path.join(folder, "minimized.txt"), "w") as f:
        f.write(report + "\n\nminimizer's steps:\n" + "\n".join(log) + "\n")
    return f"{len(program.ops)} ops to {len(small.ops)}, {len(program.leaves)} leaves to {len(small.leaves)}"
