"""Differential fuzzing of PyTorch's backward engines against refgrad's oracle.

    from refgrad.fuzz import generate, run_case
    program = generate(17)                  # a random differentiable program: seed 17, GENERATOR_VERSION
    print(program.source())                 # readable Python (torch only): also the reproducer format
    result = run_case(program, ["eager", "compiled_autograd:aot_eager"])
    result.findings                         # what refgrad.check found, triaged; [] when all passed

The parts:
* refgrad.fuzz.generator: generate(seed) -> Program, valid by construction (torch runs each op as it is
  added: shape and dtype inference); GENERATOR_VERSION names what the seeds generate.
* refgrad.fuzz.program: Program (leaves, ops, outputs) and its source.
* refgrad.fuzz.case: run_case(): refgrad.check on a program with the engines, each non-eager engine run
  twice (nondeterminism), the report triaged.
* refgrad.fuzz.triage: Finding, its kinds and its signature (engine, kind, node or error type, op set).
* refgrad.fuzz.runner: the refgrad-fuzz command: campaigns in worker processes (a crash or a hang is a
  finding), --shard, a progress bar, the findings directory.
* refgrad.fuzz.minimize: delta debugging of a finding's program, keeping its bug.
* refgrad.fuzz.report: the findings directory as markdown (refgrad-fuzz report).

docs/fuzzing.md tells how to run a campaign and read its findings.
"""
from refgrad.fuzz.case import CaseResult, run_case
from refgrad.fuzz.generator import GENERATOR_VERSION, generate
from refgrad.fuzz.program import Program
from refgrad.fuzz.triage import KINDS, Finding

__all__ = ["CaseResult", "Finding", "GENERATOR_VERSION", "KINDS", "Program", "generate", "run_case"]
