"""refgrad-fuzz report: a findings directory as markdown.

The campaign's numbers (campaign.json); a table of the bugs, one row per distinct bug (Finding.distinct_bug:
the signatures that differ only in their op sets, and for a ``where`` that names no node the same gist of
the detail), with the folder that holds its minimized repro; then one section per distinct finding,
oracle bugs first: its signature, how many cases found it and which seeds, what happened, and its repro:
the minimized program when the minimizer ran on it, else the case's, with the folder where its bug was
minimized (a campaign's --minimize minimizes one folder per distinct bug, summary.json's "minimized_as").
"""
from __future__ import annotations

import json
import os

from refgrad.fuzz.triage import KINDS, Finding


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def _minimized(folder: str) -> bool:
    return os.path.exists(os.path.join(folder, "minimized.py"))


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
                  "cases not covered by refgrad (checked against eager)."
                  + (f" Then {len(numbers['minimized'])} folders minimized, one per distinct bug, in "
                     f"{numbers['minimize_seconds']} s." if numbers.get("minimized") else ""), ""]
        kinds = numbers["findings_by_kind"]
        lines += ["| kind | cases |", "|---|---|"] + [f"| {k} | {v} |" for k, v in sorted(kinds.items())] + [""]
    found = findings(directory)
    # one row per distinct bug: the signatures that differ only in their op sets (and in the detail's
    # gist, where ``where`` names no node)
    bugs: dict[tuple, list[dict]] = {}
    for summary in found:
        bugs.setdefault(Finding.from_dict(summary).distinct_bug, []).append(summary)
    lines += [f"{len(found)} distinct findings, of {len(bugs)} distinct bugs (each unlocalized wrong gradient's op "
              "set counted apart: its minimized program says which are one bug).", ""]
    lines += ["| kind | engine | where | findings | cases | what (first) | minimized in |",
              "|---|---|---|---|---|---|---|"]
    for (engine, kind, where, *_), group in bugs.items():
        detail = group[0].get("detail", "")[:160].replace("|", "\\|")
        minimized = next((f"`{os.path.basename(s['folder'])}`" for s in group if _minimized(s["folder"])), "-")
        lines.append(f"| {kind} | {engine} | {where} | {len(group)} | {sum(s['count'] for s in group)} | {detail} "
                     f"| {minimized} |")
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
                                             if os.path.exists(os.path.join(folder, "reproducer.safetensors")) else "")]
        if "minimized_as" in summary and not _minimized(folder):
            there = os.path.join(directory, summary["minimized_as"])
            lines.append(f"- same bug as `{there}`, " + ("minimized there" if _minimized(there)
                                                         else "to be minimized there (not done)"))
        lines.append("")
        minimized = os.path.join(folder, "minimized.py")
        repro = minimized if os.path.exists(minimized) else os.path.join(folder, "case.py")
        label = "minimized repro" if repro == minimized else "repro (not minimized)"
        source = _read(repro)
        program = source[source.index("def program("):source.index("\ndef make_inputs")].rstrip() \
            if "def program(" in source else source
        lines += [f"{label} (`{repro}`, the program):", "", "```python", program, "```", ""]
    return "\n".join(lines)
