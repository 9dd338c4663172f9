"""refgrad.fuzz (issue 19): the generator, the campaign runner, triage and the minimizer.

- the generator is deterministic, and pinned: a few seeds' programs are committed
  (tests/python/fuzz_expected/), so that a change that changes what a seed generates fails here until
  GENERATOR_VERSION is bumped and the files rewritten (REFGRAD_FUZZ_PIN=1 rewrites them);
- its programs are valid: 40 seeds each run forward and backward in eager, refgrad captures every one
  (no node refused) and refgrad.check finds eager within the rule of refgrad's run (no oracle bug);
- a campaign against an engine with a planted bug (tests/python/fuzz_planted.py: MulBackward0's gradients
  times 1.01) finds it in the cases that have a MulBackward0 and only there, classifies it as a wrong
  gradient at MulBackward0, files one folder per signature, and counts a second finding of a signature in
  its folder;
- --minimize minimizes one folder of that bug, and the other points to it; the minimizer shrinks such a
  finding's program to a multiplication and little else, still finding the bug, without autocast, in
  float64;
- a worker whose engine dies (os._exit) or hangs is a finding, and the campaign goes on;
- one case through compiled autograd (aot_eager) passes, and a smoke campaign of two seeds through the
  runner against it finds nothing.
"""
import json
import os
import subprocess
import sys
from dataclasses import replace

import pytest
import torch

from refgrad.engines import CompiledAutograd, TorchCompile
from refgrad.fuzz import GENERATOR_VERSION, generate, run_case
from refgrad.fuzz.case import _recorded
from refgrad.fuzz.minimize import minimize, minimize_finding, without
from refgrad.fuzz.program import load, run_eager
from refgrad.fuzz.report import markdown
from refgrad.fuzz.runner import Campaign, main
from refgrad.fuzz.triage import Finding

import fuzz_planted

EXPECTED = os.path.join(os.path.dirname(__file__), "fuzz_expected")
PINNED = [0, 5, 11]
MUL_BUG = ("wrong_MulBackward0", "wrong_gradient", "MulBackward0")


def nodes_of(program):
    """The names of the grad_fn nodes of the program's eager forward."""
    loaded = load(program)
    return {node.name() for node in fuzz_planted._nodes(loaded.program(*loaded.make_inputs()))}


def planted_seeds(count, found=True, limit=100):
    """The first ``count`` seeds where checking with the planted MulBackward0 bug finds it (or, with
    ``found`` false, finds nothing at all): a MulBackward0 whose wrong gradient reaches a leaf unchanged
    enough to fail the rule (a later normalization can hide it)."""
    seeds = []
    for seed in range(limit):
        findings = run_case(generate(seed), ["eager", fuzz_planted.wrong_mul], repeat=False).findings
        if (findings == [] and not found) or (found and [f.bug for f in findings] == [MUL_BUG]):
            seeds.append(seed)
            if len(seeds) == count:
                return seeds
    raise AssertionError(f"fewer than {count} such seeds below {limit}")


def seeds_with(kind, count, exclude=False, node=False, limit=200):
    """The first ``count`` seeds whose program has an op of ``kind`` (``node``: a grad_fn node of that
    name), or without one when ``exclude``."""
    found = []
    for seed in range(limit):
        program = generate(seed)
        if (kind in (nodes_of(program) if node else program.op_kinds)) != exclude:
            found.append(seed)
            if len(found) == count:
                return found
    raise AssertionError(f"fewer than {count} seeds with{'out' if exclude else ''} {kind} below {limit}")


def test_the_same_seed_gives_the_same_program():
    first = [generate(seed).source() for seed in range(8)]
    again = [generate(seed).source() for seed in reversed(range(8))][::-1]
    assert first == again
    assert len(set(first)) == 8


@pytest.mark.parametrize("seed", PINNED)
def test_pinned_programs(seed):
    """A seed's program is fixed at a GENERATOR_VERSION: a silent change of the generator fails here."""
    path = os.path.join(EXPECTED, f"v{GENERATOR_VERSION}_seed{seed}.py")
    source = generate(seed).source()
    if os.environ.get("REFGRAD_FUZZ_PIN"):
        os.makedirs(EXPECTED, exist_ok=True)
        with open(path, "w") as f:
            f.write(source)
    with open(path) as f:
        assert source == f.read(), (f"generate({seed}) changed: bump GENERATOR_VERSION and pin the new programs "
                                    "(REFGRAD_FUZZ_PIN=1)")


def test_programs_cover_the_op_families():
    kinds = set()
    for seed in range(120):
        kinds.update(generate(seed).op_kinds)
    for family in ["sin", "add", "mul", "reshape", "permute", "expand", "narrow", "inplace_add", "sum", "amax",
                   "softmax", "index_select", "gather", "index_add", "matmul", "bmm", "linear", "conv2d",
                   "layer_norm", "batch_norm", "sdpa", "autograd_function", "tensor_hook",
                   "post_accumulate_grad_hook", "retain_grad", "cat", "stack", "cumsum", "topk", "lerp", "max_pool2d",
                   "interpolate_bilinear", "mse_loss"]:
        assert family in kinds, family


def test_programs_cover_the_dtypes():
    modes = {(p.dtype, p.autocast) for p in map(generate, range(40))}
    assert {("float32", None), ("float64", None), ("float32", "bfloat16"), ("float32", "float16")} <= modes


# Seed 252 (generator version 3; it was seed 13 at version 2) holds layer_norm over equal values (`w8 - w8`)
# and a gradient that is zero in exact arithmetic (w8's, about 2e-13 in R), which torch's float32 kernels
# compute by formulas that cancel (eager is 2.2e-4 from R). The rule's noise includes how far the gradient
# moves when the values it starts from move by one rounding (R~), so eager passes there; such a case failed
# as `oracle_disagrees` before (docs/fuzzing.md).
LAYER_NORM_OVER_EQUAL_VALUES = 252


def test_a_gradient_that_cancels_to_zero_is_not_a_finding():
    program = generate(LAYER_NORM_OVER_EQUAL_VALUES)
    result = run_case(program, ["eager"])
    assert "F.layer_norm" in program.source() and result.findings == [], result.report


def test_some_cases_ask_for_autograd_grad_over_a_subset_of_the_leaves(tmp_path):
    """One case in four (a draw from the seed) differentiates with torch.autograd.grad over a non-empty subset
    of the leaves its backward reaches (a proper one where it reaches two or more): refgrad.check is given
    it as inputs=, and the case's script does the same with torch alone."""
    programs = [generate(seed) for seed in range(40)]
    chosen = [p for p in programs if p.inputs is not None]
    assert 4 <= len(chosen) <= 20, [p.seed for p in chosen]
    for program in chosen:
        names = [leaf.name for leaf in program.leaves]
        reached = [name for name, grad in zip(names, run_eager(replace(program, inputs=None))) if grad is not None]
        assert program.inputs and set(program.inputs) <= set(reached), program.seed
        assert len(program.inputs) < len(reached) or len(reached) == 1, program.seed
        grads = run_eager(program)
        assert [name for name, grad in zip(names, grads) if grad is not None] == list(program.inputs), program.seed
        assert f"GRAD_INPUTS = {program.grad_inputs!r}" in program.source()
    assert "GRAD_INPUTS = None" in next(p for p in programs if p.inputs is None).source()
    program = max(chosen, key=lambda p: len(p.leaves) - len(p.inputs))
    result = run_case(program, ["eager"], repeat=False)
    assert result.findings == [] and "torch.autograd.grad over arg" in result.report, result.report
    assert sorted(line.split()[1] for line in result.report.splitlines() if line.startswith("eager ")) == \
        sorted(f"arg{i}" for i in program.grad_inputs), result.report
    # the case's script, torch alone: eager against eager over the same leaves
    path = tmp_path / "case.py"
    path.write_text(program.source())
    run = subprocess.run([sys.executable, str(path), "eager"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert [line.split(":")[0] for line in run.stdout.splitlines()] == [f"arg{i}" for i in program.grad_inputs]
    assert all(line.endswith("= 0") for line in run.stdout.splitlines()), run.stdout
    # and what its gradients() returns is torch.autograd.grad's over those leaves
    namespace = {"__name__": "__main__"}
    argv, sys.argv = sys.argv, ["case.py", "eager"]
    try:
        exec(compile(program.source(), str(path), "exec"), namespace)
    finally:
        sys.argv = argv
    inputs = namespace["make_inputs"]()
    outputs = namespace["program"](*inputs)
    expected = torch.autograd.grad(outputs, [inputs[i] for i in program.grad_inputs],
                                   [torch.ones_like(output) for output in outputs], allow_unused=True)
    got = namespace["gradients"]("eager")
    assert len(got) == len(expected) and all(map(torch.equal, got, expected))


def test_the_minimizer_keeps_autograd_grads_inputs_valid():
    """Dropping ops and leaves keeps torch.autograd.grad's inputs among the leaves left (Program.pruned), and a
    candidate left with none is not valid (run_eager refuses it)."""
    program = max((generate(seed) for seed in range(40)), key=lambda p: len(p.inputs or ()) * len(p.ops))
    assert program.inputs is not None and len(program.inputs) >= 2
    seen = []

    def keeps_inputs(candidate):
        if candidate.inputs is None:  # the step that tries a backward into every leaf instead
            return False
        assert candidate.inputs and set(candidate.inputs) <= {leaf.name for leaf in candidate.leaves}, candidate
        seen.append(candidate)
        return len(candidate.inputs) == len(program.inputs)

    small, log = minimize(program, ["eager"], ("eager", "any", "any"), seconds=60, reproduces=keeps_inputs)
    assert seen and len(small.ops) < len(program.ops), log
    assert small.inputs == program.inputs and run_eager(small)
    first = program.inputs[0]
    cut = without(program, [i for i, op in enumerate(program.ops) if first in op.uses])
    left = {leaf.name for leaf in cut.leaves}
    assert first not in left and cut.inputs == tuple(name for name in program.inputs if name in left), cut.inputs
    none_left = replace(program, inputs=())
    with pytest.raises(ValueError, match="over no leaf"):
        run_eager(none_left)


@pytest.mark.parametrize("chunk", range(4))
def test_programs_are_valid_and_refgrad_covers_them(chunk):
    """Each program runs in eager; refgrad captures it whole, and eager passes the rule against it."""
    for seed in range(chunk * 10, chunk * 10 + 10):
        program = generate(seed)
        assert all(grad is None or torch.isfinite(grad).all() for grad in run_eager(program)), seed
        result = run_case(program, ["eager"])
        assert result.uncovered == [], (seed, result.uncovered)
        assert result.findings == [], (seed, result.report, result.source)


def test_a_case_through_compiled_autograd_passes():
    result = run_case(generate(seeds_with("matmul", 1)[0]), ["eager", "compiled_autograd:aot_eager"])
    assert result.findings == [], result.report
    assert "compiled_autograd#2" in result.report  # the second run, for nondeterminism


def test_a_recorded_engine_answers_for_the_engine_it_records():
    """A campaign wraps each engine to keep its first gradients; check reads more of an engine than its name and
    gradients (compiles_forward: the rule's allowance for a compiled forward; device; backend), and the wrapper
    answers as the engine would. Until it did, no campaign gave torch_compile that allowance."""
    inner = TorchCompile(backend="aot_eager", device="cpu")
    recorded = _recorded(inner, "torch_compile:aot_eager#2")
    assert recorded.compiles_forward is True
    assert (recorded.device, recorded.backend, recorded.name) == ("cpu", "aot_eager", "torch_compile:aot_eager#2")
    assert not getattr(_recorded(CompiledAutograd(), "compiled_autograd"), "compiles_forward", False)


def test_smoke_campaign_against_compiled_autograd(tmp_path):
    """make test's smoke campaign: a fixed seed range and a case budget, eager and compiled autograd
    (aot_eager), each compiled run twice, in worker processes: every case passes."""
    campaign = Campaign(engines=["eager", "compiled_autograd:aot_eager"], findings=str(tmp_path), workers=2,
                        timeout=300, seed_list=[2, 6], progress=False)
    numbers = campaign.run()
    assert numbers["cases"] == 2 and numbers["findings_by_kind"] == {} and campaign.new == []
    assert numbers["engines"] == ["eager", "compiled_autograd"] and numbers["cases_not_covered_by_refgrad"] == 0


def test_run_case_finds_the_planted_bug_only_where_there_is_a_mul():
    # the first float64 program with a MulBackward0: no float32 rounding noise in the rule's bound to hide the
    # 1% error (at generator version 3 the first such seed of all, 0, is float32, and its noise hides it)
    with_mul = [seed for seed in seeds_with("MulBackward0", 8, node=True)
                if (generate(seed).dtype, generate(seed).autocast) == ("float64", None)]
    without = seeds_with("MulBackward0", 1, True, True)
    found = run_case(generate(with_mul[0]), ["eager", fuzz_planted.wrong_mul], repeat=False)
    assert [f.bug for f in found.findings] == [MUL_BUG], found.report
    assert run_case(generate(without[0]), ["eager", fuzz_planted.wrong_mul], repeat=False).findings == []


def test_an_engine_that_raises_is_a_finding_naming_the_root_cause():
    found = run_case(generate(0), ["eager", fuzz_planted.Raising()], repeat=False).findings
    assert [f.bug for f in found] == [("raising", "engine_raised", "RuntimeError")]
    assert found[0].detail == "RuntimeError: when compiling <- ValueError: the root of it"


def test_campaign_finds_classifies_and_dedups(tmp_path):
    with_mul, without = planted_seeds(2), planted_seeds(2, found=False)
    assert all("MulBackward0" in nodes_of(generate(seed)) for seed in with_mul)
    findings = str(tmp_path / "findings")
    campaign = Campaign(engines=["eager", "py:fuzz_planted:wrong_mul"], findings=findings, workers=2, timeout=120,
                        seed_list=with_mul + without, progress=False, minimize=True, minimize_seconds=60)
    numbers = campaign.run()
    assert numbers["cases"] == 4 and numbers["findings_by_kind"] == {"wrong_gradient": 2}
    folders = sorted(campaign.new)
    assert len(folders) == 2  # two programs, two op sets: two signatures of one bug
    for folder in folders:
        summary = json.load(open(os.path.join(folder, "summary.json")))
        assert (summary["engine"], summary["kind"], summary["where"]) == MUL_BUG
        assert summary["seed"] in with_mul and summary["count"] == 1
        assert "MulBackward0" in open(os.path.join(folder, "report.txt")).read()
        assert os.path.exists(os.path.join(folder, "reproducer.safetensors"))
        compile(open(os.path.join(folder, "case.py")).read(), "case.py", "exec")
    # the same seed again: no new folder, the signature's count goes up
    again = Campaign(engines=["eager", "py:fuzz_planted:wrong_mul"], findings=findings, workers=1, timeout=120,
                     seed_list=with_mul[:1], progress=False)
    again.run()
    assert again.new == []
    counts = sorted(json.load(open(os.path.join(f, "summary.json")))["count"] for f in folders)
    assert counts == [1, 2]
    lines = open(os.path.join(findings, "cases.jsonl")).read().splitlines()
    assert len(lines) == 5
    # --minimize: one folder of the bug was minimized (in a worker), its program beside the case; the
    # other points to it (tests/python/test_fuzz_runner.py tests the choice)
    (chosen,) = campaign.minimized
    (other,) = set(folders) - {chosen}
    small = open(os.path.join(chosen, "minimized.py")).read()
    assert "minimized from case" in small and "* " in small.split("def program")[1]
    assert "MulBackward0" in open(os.path.join(chosen, "minimized.txt")).read()
    assert os.path.exists(os.path.join(chosen, "minimized.safetensors"))
    assert not os.path.exists(os.path.join(other, "minimized.py"))
    assert json.load(open(os.path.join(other, "summary.json")))["minimized_as"] == os.path.basename(chosen)
    assert f"- same bug as `{chosen}`, minimized there" in markdown(findings)
    # minimize_finding on the other (what `refgrad-fuzz minimize FOLDER` does), then the markdown report
    assert "ops to" in minimize_finding(other, seconds=60)
    assert os.path.exists(os.path.join(other, "minimized.py"))
    text = markdown(findings)
    assert "2 distinct findings" in text and text.count("## wrong_gradient: wrong_MulBackward0 at MulBackward0") == 2
    assert text.count("minimized repro") == 2 and "same bug as" not in text
    assert "| wrong_gradient | wrong_MulBackward0 | MulBackward0 | 2 | 3 |" in text  # one bug: 2 signatures, 3 cases


def test_minimizer_shrinks_and_keeps_the_bug():
    seed = max(planted_seeds(5), key=lambda s: len(generate(s).ops))  # version 3: seed 24, 14 ops
    program = generate(seed)
    small, log = minimize(program, ["eager", fuzz_planted.wrong_mul], MUL_BUG, seconds=60)
    assert len(program.ops) >= 8 and len(small.ops) == 1, (log, small.source())
    assert "MulBackward0" in nodes_of(small)
    assert small.autocast is None and small.dtype == "float64"
    found = run_case(small, ["eager", fuzz_planted.wrong_mul], repeat=False)
    assert MUL_BUG in [f.bug for f in found.findings]


@pytest.mark.parametrize("engine, kind, where, seeds", [("Crashing", "worker_crashed", "exit code 3", [1, 2]),
                                                        ("Hanging", "timeout", "timeout", [1])])
def test_a_worker_that_dies_or_hangs_is_a_finding(tmp_path, engine, kind, where, seeds):
    findings = str(tmp_path / "findings")
    campaign = Campaign(engines=["eager", f"py:fuzz_planted:{engine}"], findings=findings, workers=1, timeout=3,
                        seed_list=seeds, progress=False)
    numbers = campaign.run()
    # the campaign went on after the crash: a fresh worker ran the second case
    assert numbers["cases"] == len(seeds) and numbers["findings_by_kind"] == {kind: len(seeds)}
    summary = json.load(open(os.path.join(campaign.new[0], "summary.json")))
    assert (summary["kind"], summary["engine"], summary["where"]) == (kind, engine.lower(), where)


def test_shards_split_the_seeds():
    shards = [list(Campaign(engines=["eager"], findings="-", cases=4, shard=(i, 3), seed_start=10).seeds())
              for i in range(3)]
    assert shards[1] == [11, 14, 17, 20]
    assert sorted(sum(shards, [])) == list(range(10, 22))
    assert list(Campaign(engines=["eager"], findings="-", seed_list=[5, 3]).seeds()) == [5, 3]


def test_signature_and_slug():
    finding = Finding("wrong_gradient", "compiled_autograd:inductor", "MulBackward0", ("add", "mul"))
    assert finding.signature == ("compiled_autograd:inductor", "wrong_gradient", "MulBackward0", ("add", "mul"))
    assert finding.slug.startswith("wrong_gradient-compiled_autograd_inductor-MulBackward0-")
    assert Finding.from_dict(finding.to_dict()) == finding


def test_command_line_show_and_report(tmp_path, capsys):
    assert main(["show", "3"]) == 0
    assert capsys.readouterr().out.strip() == generate(3).source().strip()
    os.makedirs(tmp_path / "empty")
    assert main(["report", str(tmp_path / "empty")]) == 0
    assert "0 distinct findings" in capsys.readouterr().out


def test_a_torch_compile_that_ran_no_compiled_code_is_not_compiled_not_an_engine_bug(tmp_path):
    """retain_grad makes dynamo skip the whole frame under AOTDispatcher, by design ("Tensor.retain_grad()
    does not work with AOTDispatcher"): torch.compile then runs eager. check says the engine ran no compiled
    code; triage files it as not_compiled, not as an engine_raised bug (seed 11 of a campaign did so)."""
    import refgrad
    from refgrad.fuzz.triage import classify

    def program(q, k, v):
        q = q * 1.0
        q.retain_grad()
        return torch.nn.functional.scaled_dot_product_attention(q, k, v)

    leaves = [torch.randn(1, 2, 3, 4, requires_grad=True) for _ in range(3)]
    report = refgrad.check(program, *leaves, engines=["torch_compile:aot_eager"], reproducer_dir=str(tmp_path))
    findings = classify(report, ("retain_grad", "scaled_dot_product_attention"))
    assert [f.bug for f in findings] == [("torch_compile:aot_eager", "not_compiled", "fell_back")], findings
