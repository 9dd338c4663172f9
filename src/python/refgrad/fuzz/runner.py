"""refgrad-fuzz: a campaign of generated cases against engines, in worker processes, into a findings
directory.

    refgrad-fuzz --engines eager,compiled_autograd:aot_eager --cases 100 --workers 2 --findings fuzz-findings
    refgrad-fuzz --engines compiled_autograd:inductor --seconds 3600 --shard 0/4     # one machine of four
    refgrad-fuzz report fuzz-findings > findings.md                                   # markdown
    refgrad-fuzz minimize fuzz-findings/<finding>                                     # shrink one finding
    refgrad-fuzz show 17                                                              # print case 17
    python -m refgrad.fuzz ...                                                        # the same

Seeds: case k of shard i/n is seed ``seed_start + i + k n``, so that n machines given the same
--seed-start never run a seed twice. A case is its seed and the generator's version
(refgrad.fuzz.GENERATOR_VERSION): rerunning a seed reruns the same program.

Process isolation: each worker is a process of its own (multiprocessing, spawn), that runs case after
case, with torch's intra-op threads set to the cores shared among the workers (two workers of two threads
each on two cores run at a third of the speed of two one-thread workers: generated programs are small, and
their ops wait on each other's threads). The campaign waits on each with the per-case --timeout: a worker that dies (a segfault in torch,
os._exit) is a worker_crashed finding, one that runs past the timeout is killed and is a timeout
finding; either way a fresh worker takes its place and the campaign goes on. Each worker tells the
campaign which engine it is running, so that the finding names the engine that crashed or hung
("(oracle)" when no engine had started: refgrad's capture and run, or eager).

The findings directory: one folder per signature (refgrad.fuzz.triage), holding
    case.py            the case's program (torch only; run as a script it compares eager with the engine)
    report.txt         refgrad.check's report (or the traceback of what raised)
    summary.json       the finding, its signature, the seeds that found it, the generator's version
    reproducer.safetensors   refgrad's bundle, when check wrote one (`refgrad check` re-runs it)
    minimized.py, minimized.txt   after `refgrad-fuzz minimize` (or --minimize)
and campaign.json (the numbers of the last campaign) and cases.jsonl (one line per case run).

--minimize: one bug files many folders (one per op set), so after the cases the campaign minimizes one
folder per distinct bug (refgrad.fuzz.triage's Finding.distinct_bug) among its new folders: the one whose
case has the fewest ops, then the lowest seed. The other new folders of that bug get "minimized_as" (the
minimized folder's name) in their summary.json, which `refgrad-fuzz report` shows; a bug that a folder
of an earlier campaign holds minimized already is not minimized again, its new folders point there. A
worker crash or a timeout is not minimized (refgrad.fuzz.minimize says why). campaign.json's ``seconds``
and cases/s count the cases only; ``minimize_seconds`` is the minimization's time.
"""
from __future__ import annotations

import argparse
import collections
import json
import multiprocessing
import os
import re
import shutil
import signal
import sys
import time
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from typing import Any, Callable, Optional, Sequence

# --- the worker: a process that runs cases until told to stop ---


def _worker_main(conn, config: dict) -> None:
    """A worker's loop: receive ("case", seed) or ("minimize", folder), send back ("result", seed, dict) or
    ("minimized", folder, text); ("engine", seed, name) as each engine starts."""
    import warnings

    import torch  # imported once per worker, not per case

    torch.set_num_threads(config["threads"])

    # torch's warnings and logs (dynamo's about what it cannot trace, fake tensors' tracebacks, ...) would
    # bury the progress bar: they go to the findings directory's workers.log (what matters of a case is in
    # its report)
    warnings.filterwarnings("ignore", category=UserWarning)
    log = os.open(os.path.join(config["findings"], "workers.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)

    from refgrad.fuzz import case as case_module
    from refgrad.fuzz.generator import generate

    current = {"seed": None}
    case_module.engine_started.append(lambda name: conn.send(("engine", current["seed"], name)))
    conn.send(("ready",))  # imports done: the campaign's per-case timeout starts counting from here
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        if message[0] == "stop":
            return
        if message[0] == "minimize":
            from refgrad.fuzz.minimize import minimize_finding
            text = minimize_finding(message[1], config["engines"], seconds=config.get("minimize_seconds", 300))
            conn.send(("minimized", message[1], text))
            continue
        seed = current["seed"] = message[1]
        workdir = os.path.join(config["findings"], ".work", str(seed))
        try:
            program = generate(seed, max_ops=config["max_ops"])
            result = case_module.run_case(program, config["engines"], reproducer_dir=workdir,
                                          repeat=config["repeat"])
        except Exception as error:  # not check's (run_case triages those): the fuzzer's own
            import traceback
            from refgrad.fuzz.triage import Finding
            result = case_module.CaseResult(seed, 0, (), [Finding("fuzzer_error", "refgrad.fuzz", type(error).__name__,
                                                                  (), str(error).strip()[:200])],
                                            report=traceback.format_exc())
        conn.send(("result", seed, result.to_dict(), _resident_mib()))


def _resident_mib() -> float:
    """This process's resident memory in MiB (0 where /proc is not there to say)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return 0.0


def _default_worker_memory(workers: int) -> float:
    """Half of the machine's memory shared among the workers, in MiB (4096 where it cannot be read)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20
    except (ValueError, OSError):
        return 4096.0
    return max(1024.0, total / 2 / max(1, workers))


@dataclass
class _Worker:
    process: Any
    conn: Any
    job: Optional[tuple] = None  # ("case", seed) or ("minimize", folder)
    deadline: float = 0.0
    engine: str = ""  # the engine running now
    done: int = 0  # jobs it has finished
    resident_mib: float = 0.0  # its resident memory after its last case


# --- the campaign ---


@dataclass
class Campaign:
    """A campaign's settings (the command line's) and what it found so far."""

    engines: list[str]
    findings: str
    cases: Optional[int] = None
    seconds: Optional[float] = None
    workers: int = 1
    timeout: float = 300.0
    shard: tuple[int, int] = (0, 1)
    seed_start: int = 0
    max_ops: int = 16
    repeat: bool = True
    minimize: bool = False
    minimize_seconds: float = 300.0
    progress: bool = True
    seed_list: Optional[list[int]] = None  # exactly these seeds (--seeds), instead of a shard's range
    # a worker whose resident memory has passed this many MiB after a case is replaced (what torch caches per
    # process, compiled graphs above all, stays bounded); None: half the machine's memory over the workers
    worker_memory: Optional[float] = None
    recycle: Optional[int] = None  # also replace a worker after this many jobs (None: only for its memory)
    startup_timeout: float = 300.0
    worker_main: Callable = _worker_main  # what each worker process runs (a test's fake, which imports no torch)
    # what it found
    ran: int = 0
    by_kind: collections.Counter = field(default_factory=collections.Counter)
    new: list[str] = field(default_factory=list)  # folders made by this campaign
    uncovered: int = 0
    workers_started: int = 0  # worker processes started, replacements included
    elapsed: float = 0.0  # the cases' seconds
    minimized: list[str] = field(default_factory=list)  # the folders --minimize minimized, one per distinct bug
    minimize_elapsed: float = 0.0  # the minimization's seconds, after the cases

    @property
    def threads_per_worker(self) -> int:
        """torch's intra-op threads in each worker: the cores shared among the workers, at least 1."""
        return max(1, (os.cpu_count() or 1) // self.workers)

    def seeds(self):
        if self.seed_list is not None:
            yield from self.seed_list
            return
        index, count = self.shard
        k = 0
        while self.cases is None or k < self.cases:
            yield self.seed_start + index + k * count
            k += 1

    def run(self) -> dict:
        """Runs the campaign; returns its numbers (also written to campaign.json)."""
        from refgrad.fuzz.case import engine_name
        os.makedirs(self.findings, exist_ok=True)
        self.engine_names = [engine_name(spec) for spec in self.engines]  # fails early on a bad name
        context = multiprocessing.get_context("spawn")
        config = {"engines": list(self.engines), "findings": self.findings, "max_ops": self.max_ops,
                  "repeat": self.repeat, "minimize_seconds": self.minimize_seconds,
                  "threads": self.threads_per_worker}
        memory_limit = self.worker_memory or _default_worker_memory(self.workers)
        # all start at once (each imports torch); one that dies is replaced when there is work for it
        workers: list[Optional[_Worker]] = [self._ready(w) for w in [self._spawn(context, config)
                                                                     for _ in range(self.workers)]]
        seeds, start = self.seeds(), time.monotonic()
        bar = _Progress(self.cases, self.progress)
        minimize_queue: list[str] = []
        exhausted = minimizing = False
        minimize_start = 0.0
        try:
            while True:
                now = time.monotonic()
                out_of_time = self.seconds is not None and now - start >= self.seconds
                for i, worker in enumerate(workers):
                    if worker is not None and worker.job is not None:
                        continue
                    if worker is not None and (worker.resident_mib > memory_limit or
                                               self.recycle is not None and worker.done >= self.recycle):
                        self._stop(worker)
                        worker = workers[i] = None
                    job = None
                    if not exhausted and not out_of_time:
                        seed = next(seeds, None)
                        if seed is None:
                            exhausted = True
                        else:
                            job = (("case", seed), self.timeout)
                    if job is None and minimize_queue:
                        job = (("minimize", minimize_queue.pop(0)), self.minimize_seconds + self.timeout)
                    if job is None:
                        continue
                    if worker is None:
                        worker = workers[i] = self._ready(self._spawn(context, config))
                    self._send(worker, *job)
                if all(worker is None or worker.job is None for worker in workers):
                    if self.minimize and not minimizing:  # the cases are done: minimize what they found
                        minimizing, minimize_start = True, time.monotonic()
                        self.elapsed = minimize_start - start
                        bar.close()  # its time and rate are the cases'
                        self.minimized = self._minimize_plan()
                        minimize_queue.extend(self.minimized)
                        if self.progress and self.minimized:
                            bar.write(f"minimizing {len(self.minimized)} of the {len(self.new)} new folders, "
                                      "one per distinct bug")
                        continue
                    break
                busy = [worker for worker in workers if worker is not None and worker.job is not None]
                timeout = max(0.0, min(worker.deadline for worker in busy) - time.monotonic())
                if self.seconds is not None and not out_of_time:
                    timeout = min(timeout, max(0.0, start + self.seconds - time.monotonic()))
                # until a worker sends something or dies, or the first deadline
                wait([w.conn for w in busy] + [w.process.sentinel for w in busy], timeout=timeout + 0.01)
                for worker in busy:
                    index = workers.index(worker)
                    dead = False
                    try:
                        while worker.conn.poll():
                            self._receive(worker, worker.conn.recv(), bar)
                    except (EOFError, ConnectionResetError, OSError):
                        dead = True  # its end of the pipe closed: it died
                    if worker.job is None:
                        continue
                    if dead or not worker.process.is_alive():
                        worker.process.join(timeout=10)
                        self._lost(worker, "worker_crashed", _exit_text(worker.process.exitcode), bar)
                        workers[index] = None
                    elif time.monotonic() > worker.deadline:
                        worker.process.kill()
                        worker.process.join()
                        self._lost(worker, "timeout", "timeout", bar)
                        workers[index] = None
        finally:
            for worker in workers:
                if worker is not None:
                    self._stop(worker)
            bar.close()
            shutil.rmtree(os.path.join(self.findings, ".work"), ignore_errors=True)
        if minimizing:
            self.minimize_elapsed = time.monotonic() - minimize_start
        else:
            self.elapsed = time.monotonic() - start
        numbers = self.numbers()
        with open(os.path.join(self.findings, "campaign.json"), "w") as f:
            json.dump(numbers, f, indent=2)
        return numbers

    def numbers(self) -> dict:
        """The campaign's numbers; ``seconds`` is the cases' time, from the moment the workers were ready
        (their startup, importing torch, is not counted) to the last case's end; ``minimize_seconds`` is the
        time --minimize took after that."""
        return {"engines": self.engine_names, "cases": self.ran, "seconds": round(self.elapsed, 2),
                "cases_per_second": round(self.ran / self.elapsed, 3) if self.elapsed else None,
                "minimized": list(self.minimized), "minimize_seconds": round(self.minimize_elapsed, 2),
                "workers": self.workers, "workers_started": self.workers_started,
                "threads_per_worker": self.threads_per_worker, "shard": f"{self.shard[0]}/{self.shard[1]}", "seed_start": self.seed_start,
                "findings_by_kind": dict(self.by_kind), "new_findings": list(self.new),
                "cases_not_covered_by_refgrad": self.uncovered, "generator_version": _version()}

    # --- workers ---

    def _spawn(self, context, config: dict) -> _Worker:
        self.workers_started += 1
        parent, child = context.Pipe()
        process = context.Process(target=self.worker_main, args=(child, config), daemon=True)
        process.start()
        child.close()
        return _Worker(process, parent)

    def _ready(self, worker: _Worker) -> _Worker:
        """The worker, once it has imported torch and refgrad (startup is not a case's time)."""
        if not worker.conn.poll(self.startup_timeout):
            worker.process.kill()
            raise RuntimeError(f"refgrad-fuzz: a worker did not start in {self.startup_timeout:g} s")
        message = worker.conn.recv()  # EOFError: it died importing
        assert message == ("ready",), message
        return worker

    def _send(self, worker: _Worker, job: tuple, timeout: float) -> None:
        worker.job, worker.engine = job, ""
        worker.deadline = time.monotonic() + timeout
        worker.conn.send(job)

    def _stop(self, worker: _Worker) -> None:
        try:
            if worker.job is None and worker.process.is_alive():
                worker.conn.send(("stop",))
                worker.process.join(timeout=5)
        except (OSError, BrokenPipeError):
            pass
        if worker.process.is_alive():
            worker.process.kill()
            worker.process.join()

    def _receive(self, worker: _Worker, message: tuple, bar: "_Progress") -> None:
        if message[0] == "engine":
            worker.engine = message[2]
            return
        worker.done += 1
        if message[0] == "minimized":
            worker.job = None
            if self.progress:
                bar.write(f"minimized {message[1]}: {message[2]}")
            return
        worker.job = None
        worker.resident_mib = message[3]
        from refgrad.fuzz.case import CaseResult
        self._record(CaseResult.from_dict(message[2]), bar)

    def _lost(self, worker: _Worker, kind: str, where: str, bar: "_Progress") -> None:
        """A case whose worker died or hung: a finding, blamed on the engine that was running."""
        from refgrad.fuzz.case import CaseResult
        from refgrad.fuzz.generator import generate
        from refgrad.fuzz.triage import Finding
        job, worker.job = worker.job, None
        if job[0] != "case":
            bar.write(f"minimizing {job[1]}: the worker {'hung' if kind == 'timeout' else 'died'} ({where})")
            return
        program = generate(job[1], max_ops=self.max_ops)
        engine = worker.engine.split("#")[0] or "(oracle)"
        detail = (f"the worker running {engine} on case {job[1]} "
                  + (f"ran past the {self.timeout:g} s timeout" if kind == "timeout" else f"died ({where})"))
        result = CaseResult(job[1], program.version, program.op_kinds,
                            [Finding(kind, engine, where, program.op_kinds, detail)],
                            report=detail, source=program.source(_shown_engine(self.engines)))
        self._record(result, bar)

    # --- findings ---

    def _record(self, result, bar: "_Progress") -> None:
        self.ran += 1
        self.uncovered += bool(result.uncovered)
        with open(os.path.join(self.findings, "cases.jsonl"), "a") as f:
            f.write(json.dumps({"seed": result.seed, "version": result.version, "seconds": round(result.seconds, 3),
                                "findings": [finding.slug for finding in result.findings],
                                "uncovered": result.uncovered}) + "\n")
        for finding in result.findings:
            self.by_kind[finding.kind] += 1
            self._file(finding, result)
        shutil.rmtree(os.path.join(self.findings, ".work", str(result.seed)), ignore_errors=True)
        bar.update(self.by_kind, len(self.new))

    def _file(self, finding, result) -> None:
        """Files one finding: a new folder for a new signature, else one more seed in its summary."""
        folder = os.path.join(self.findings, finding.slug)
        summary_path = os.path.join(folder, "summary.json")
        if os.path.exists(summary_path):
            with open(summary_path) as f:
                summary = json.load(f)
            summary["count"] += 1
            if len(summary["seeds"]) < 100:
                summary["seeds"].append(result.seed)
            with open(summary_path, "w") as f:
                json.dump(summary, f, indent=2)
            return
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "case.py"), "w") as f:
            f.write(result.source)
        with open(os.path.join(folder, "report.txt"), "w") as f:
            f.write(result.report + "\n")
        bundle = result.reproducers.get(finding.engine)
        if bundle and os.path.exists(bundle):
            shutil.copy(bundle, os.path.join(folder, "reproducer.safetensors"))
            with open(os.path.join(folder, "report.txt"), "w") as f:  # the bundle's path as it is kept
                f.write(result.report.replace(bundle, os.path.join(folder, "reproducer.safetensors")) + "\n")
        summary = {**finding.to_dict(), "seed": result.seed, "generator_version": result.version,
                   "engines": self.engine_names, "engine_specs": list(self.engines), "count": 1, "seeds": [result.seed], "torch": _torch_version(),
                   "max_ops": self.max_ops}
        with open(summary_path, "w") as f:
            json.dump(summary, f, indent=2)
        self.new.append(folder)

    def _minimize_plan(self) -> list[str]:
        """The folders to minimize after the cases: of this campaign's new folders, one per distinct bug
        (Finding.distinct_bug), the one whose case has the fewest ops (the minimizer's work), then the
        lowest seed; smallest first. Each other new folder of a bug gets "minimized_as" in its summary.json,
        the minimized folder's name. A bug that a folder of the directory holds minimized already (from an
        earlier campaign) is not minimized again: its new folders point to that folder."""
        from refgrad.fuzz.triage import Finding

        new_by_bug: dict[tuple, list[tuple[int, int, str]]] = {}  # (ops, seed, folder) each: min() is the one
        for folder in self.new:
            summary = _summary(folder)
            if summary["kind"] in _NOT_MINIMIZED:
                continue
            new_by_bug.setdefault(Finding.from_dict(summary).distinct_bug, []).append(
                (_case_ops(folder), summary["seed"], folder))
        minimized_before: dict[tuple, str] = {}
        for name in sorted(os.listdir(self.findings)):
            folder = os.path.join(self.findings, name)
            if all(os.path.exists(os.path.join(folder, file)) for file in ("summary.json", "minimized.py")):
                minimized_before.setdefault(Finding.from_dict(_summary(folder)).distinct_bug, folder)
        plan = []
        for bug, candidates in new_by_bug.items():
            if bug in minimized_before:
                chosen = minimized_before[bug]
            else:
                smallest = min(candidates)
                plan.append(smallest)
                chosen = smallest[2]
            for _, _, folder in candidates:
                if folder != chosen:
                    summary = _summary(folder)
                    summary["minimized_as"] = os.path.basename(chosen)
                    with open(os.path.join(folder, "summary.json"), "w") as f:
                        json.dump(summary, f, indent=2)
        return [folder for _, _, folder in sorted(plan)]


# not minimized in a worker: the minimizer would crash or hang it too (refgrad.fuzz.minimize)
_NOT_MINIMIZED = ("worker_crashed", "timeout")


def _summary(folder: str) -> dict:
    with open(os.path.join(folder, "summary.json")) as f:
        return json.load(f)


def _case_ops(folder: str) -> int:
    """How many ops the folder's case has, as the first line of its case.py says ("...: 14 ops, 8 leaves,
    ..."); a very large number when it does not say."""
    with open(os.path.join(folder, "case.py")) as f:
        found = re.search(r"\b([0-9]+) ops,", f.readline())
    return int(found.group(1)) if found else sys.maxsize


def _shown_engine(engines: Sequence[str]) -> str:
    return next((e for e in engines if e != "eager" and not e.startswith("py:")), "compiled_autograd:aot_eager")


def _exit_text(code: Optional[int]) -> str:
    if code is not None and code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            pass
    return f"exit code {code}"


def _version() -> int:
    from refgrad.fuzz.generator import GENERATOR_VERSION
    return GENERATOR_VERSION


def _torch_version() -> str:
    import torch
    return torch.__version__


class _Progress:
    """A live progress line: tqdm when it is installed, else a plain line rewritten in place."""

    def __init__(self, total: Optional[int], enabled: bool):
        self.enabled, self.total, self.done, self.start = enabled, total, 0, time.monotonic()
        self.bar, self.closed = None, False
        if enabled:
            try:
                from tqdm import tqdm
                self.bar = tqdm(total=total, unit="case", dynamic_ncols=True, file=sys.stderr)
            except ImportError:
                self.bar = None

    def update(self, by_kind: collections.Counter, distinct: int) -> None:
        self.done += 1
        if not self.enabled:
            return
        kinds = ", ".join(f"{kind} {count}" for kind, count in sorted(by_kind.items())) or "none"
        text = f"findings: {kinds}; {distinct} new"
        if self.bar is not None:
            self.bar.set_postfix_str(text, refresh=False)
            self.bar.update(1)
        else:
            rate = self.done / max(time.monotonic() - self.start, 1e-9)
            of = f"/{self.total}" if self.total else ""
            sys.stderr.write(f"\r{self.done}{of} cases, {rate:.2f} cases/s, {text}   ")
            sys.stderr.flush()

    def write(self, text: str) -> None:
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.write(text)
        else:
            sys.stderr.write("\n" + text + "\n")

    def close(self) -> None:
        """Ends the line; a second call does nothing (the bar closes when the cases end, before --minimize)."""
        if self.bar is not None:
            self.bar.close()
        elif self.enabled and self.done and not self.closed:
            sys.stderr.write("\n")
        self.closed = True


# --- the command line ---


def _shard(text: str) -> tuple[int, int]:
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shard takes i/n, got {text!r}") from None
    if not 0 <= index < count:
        raise argparse.ArgumentTypeError(f"--shard {text}: i must be in 0..n-1")
    return index, count


def _run_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--engines", default="eager,compiled_autograd:aot_eager",
                        help="comma-separated engines: eager, compiled_autograd[:BACKEND], torch_compile[:BACKEND], "
                             "py:MODULE:ATTR (an engine, engine factory or torch.compile backend of your own)")
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--cases", type=int, help="how many cases (default 100 unless --seconds)")
    budget.add_argument("--seconds", type=float, help="run cases until this many seconds have passed")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="worker processes (default: cores)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per case before it is a timeout finding")
    parser.add_argument("--shard", type=_shard, default=(0, 1), help="i/n: this machine's seeds of n (default 0/1)")
    parser.add_argument("--seed-start", type=int, default=0, help="the first seed (default 0)")
    parser.add_argument("--seeds", help="comma-separated seeds to run (a finding's, again), instead of a range")
    parser.add_argument("--max-ops", type=int, default=16, help="the most ops a generated program has (default 16)")
    parser.add_argument("--findings", default="fuzz-findings", help="the findings directory (default fuzz-findings)")
    parser.add_argument("--no-repeat", action="store_true",
                        help="run each engine once (no nondeterminism check; faster)")
    parser.add_argument("--minimize", action="store_true",
                        help="after the cases, minimize one new folder per distinct bug (the bug's others point to it)")
    parser.add_argument("--minimize-seconds", type=float, default=300.0,
                        help="budget per minimized folder (default 300)")
    parser.add_argument("--worker-memory", type=float, metavar="MIB",
                        help="replace a worker whose resident memory has passed MIB after a case (bounds what torch "
                             "caches; default: half the machine's memory shared among the workers)")
    parser.add_argument("--recycle", type=int, metavar="N", help="also replace a worker after N cases (default: never)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    commands = ("run", "report", "minimize", "show")
    if not argv or argv[0] not in commands and argv[0] not in ("-h", "--help"):
        argv = ["run"] + argv
    parser = argparse.ArgumentParser(prog="refgrad-fuzz", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    _run_parser(sub.add_parser("run", help="run a campaign (the default command)"))
    report = sub.add_parser("report", help="the findings directory as markdown")
    report.add_argument("findings", nargs="?", default="fuzz-findings")
    minimize = sub.add_parser("minimize", help="minimize one finding (its folder)")
    minimize.add_argument("folder")
    minimize.add_argument("--seconds", type=float, default=300.0)
    minimize.add_argument("--engines", help="the engines to check with (default: the finding's campaign's)")
    show = sub.add_parser("show", help="print the program of a seed")
    show.add_argument("seed", type=int)
    show.add_argument("--max-ops", type=int, default=16)
    args = parser.parse_args(argv)

    if args.command == "show":
        from refgrad.fuzz.generator import generate
        print(generate(args.seed, max_ops=args.max_ops).source())
        return 0
    if args.command == "report":
        from refgrad.fuzz.report import markdown
        print(markdown(args.findings))
        return 0
    if args.command == "minimize":
        from refgrad.fuzz.minimize import minimize_finding
        engines = args.engines.split(",") if args.engines else None
        print(minimize_finding(args.folder, engines, seconds=args.seconds))
        return 0
    campaign = Campaign(engines=[e for e in args.engines.split(",") if e], findings=args.findings,
                        cases=args.cases if args.cases is not None or args.seconds is not None else 100,
                        seconds=args.seconds, workers=max(1, args.workers), timeout=args.timeout, shard=args.shard,
                        seed_start=args.seed_start, max_ops=args.max_ops, repeat=not args.no_repeat,
                        minimize=args.minimize, minimize_seconds=args.minimize_seconds, progress=not args.quiet,
                        seed_list=[int(s) for s in args.seeds.split(",")] if args.seeds else None,
                        worker_memory=args.worker_memory,
                        recycle=None if args.recycle is None else max(1, args.recycle))
    numbers = campaign.run()
    print(json.dumps(numbers, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
