"""refgrad-fuzz report: a findings directory as markdown.

The campaign's numbers (campaign.json), then one section per distinct finding, oracle bugs first: its
signature, how many cases found it and which seeds, what happened, and its repro: the minimized
program when the minimizer ran, else the case's.
"""
from __future__ import annotations

import json
import os

from refgrad.fuzz.triage import KINDS


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def findings(directory: str) -> list[dict]:
    """Each finding's summary (with "folder" added), oracle bugs first, then by kind and count."""
    found = []
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name, "summary.json")
        if os.path.isfile(path):
            summary = json.loads(_read(path))
            summary["folder"] = os.path.join(directory, name)
            found.append(summary)
    return sorted(found, key=lambda s: (KINDS.index(s["kind"]) if s["kind"] in KINDS else len(KINDS), -s["count"]))


def markdown(directory: str) -> str:
    lines = [f"# refgrad-fuzz findings: {directory}", ""]
    campaign = os.path.join(directory, "campaign.json")
    if os.path.exists(campaign):
        numbers = json.loads(_read(campaign))
        lines += [f"Last campaign: {numbers['cases']} cases in {numbers['seconds']} s "
                  f"({numbers['cases_per_second']} cases/s, {numbers['workers']} workers), engines "
                  f"{', '.join(numbers['engines'])}, shard {numbers['shard']}, seeds from {numbers['seed_start']}, "
                  f"generator version {numbers['generator_version']}; {numbers['cases_not_covered_by_refgrad']} "
                  "cases not covered by refgrad (checked against eager).", ""]
        kinds = numbers["findings_by_kind"]
        lines += ["| kind | cases |", "|---|---|"] + [f"| {k} | {v} |" for k, v in sorted(kinds.items())] + [""]
    found = findings(directory)
    lines += [f"{len(found)} distinct findings.", ""]
    # one row per bug, (engine, kind, where): the signatures that differ only in their op sets
    bugs: dict[tuple, list[dict]] = {}
    for summary in found:
        bugs.setdefault((summary["engine"], summary["kind"], summary["where"]), []).append(summary)
    lines += ["| kind | engine | where | findings | cases | what (first) |", "|---|---|---|---|---|---|"]
    for (engine, kind, where), group in bugs.items():
        detail = group[0].get("detail", "")[:160].replace("|", "\\|")
        lines.append(f"| {kind} | {engine} | {where} | {len(group)} | {sum(s['count'] for s in group)} | {detail} |")
    lines.append("")
    for summary in found:
        folder = summary["folder"]
        lines += [f"## {summary['kind']}: {summary['engine']} at {summary['where']}", "",
                  f"- signature: `{summary['signature']}`",
                  f"- cases: {summary['count']} (seeds {', '.join(map(str, summary['seeds'][:10]))}"
                  f"{', ...' if len(summary['seeds']) > 10 else ''}), generator version {summary['generator_version']}, "
                  f"torch {summary.get('torch', '?')}",
                  f"- what: {summary.get('detail', '')}",
                  f"- folder: `{folder}`" + (" (reproducer.safetensors: `refgrad check` re-runs it)"
                                             if os.path.exists(os.path.join(folder, "reproducer.safetensors")) else ""),
                  ""]
        minimized = os.path.join(folder, "minimized.py")
        repro = minimized if os.path.exists(minimized) else os.path.join(folder, "case.py")
        label = "minimized repro" if repro == minimized else "repro (not minimized)"
        source = _read(repro)
        program = source[source.index("def program("):source.index("\ndef make_inputs")].rstrip() \
            if "def program(" in source else source
        lines += [f"{label} (`{repro}`, the program):", "", "```python", program, "```", ""]
    return "\n".join(lines)
