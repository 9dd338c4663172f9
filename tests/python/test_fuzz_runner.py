"""refgrad-fuzz's --minimize (issue 19): after the cases a campaign minimizes one folder per distinct bug,
not every new folder, and campaign.json's seconds are the cases' only; a worker past its memory limit is
replaced.

The campaigns here run a fake worker (tests/python/fuzz_fake_worker.py) that imports no torch: its cases
find what its table says, at once, and its minimizer takes the campaign's whole --minimize-seconds.
"""
import json
import os

import pytest
import torch  # noqa: F401  (filing a finding asks torch's version: imported here, before a campaign's clock)

from refgrad.fuzz.report import markdown
from refgrad.fuzz.runner import Campaign
from refgrad.fuzz.triage import Finding

from fuzz_fake_worker import RESIDENT_MIB, fake_worker

MINIMIZE_SECONDS = 0.5


def campaign(findings, seeds, minimize_seconds=0.0):
    return Campaign(engines=["eager"], findings=str(findings), workers=2, seed_list=seeds, minimize=True,
                    minimize_seconds=minimize_seconds, progress=False, worker_main=fake_worker)


def folders_by_seed(directory):
    """seed -> (folder, its summary) of each finding in the directory."""
    found = {}
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name, "summary.json")
        if os.path.exists(path):
            summary = json.load(open(path))
            found[summary["seed"]] = (os.path.join(directory, name), summary)
    return found


def minimized(folder):
    return os.path.exists(os.path.join(folder, "minimized.py"))


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    """One campaign of the fake worker's seeds 1-9, its numbers and its folders by seed."""
    findings = tmp_path_factory.mktemp("findings")
    numbers = campaign(findings, list(range(1, 10)), MINIMIZE_SECONDS).run()
    return findings, numbers, folders_by_seed(findings)


def test_one_folder_per_bug_is_minimized_and_the_others_point_to_it(ran):
    findings, numbers, folders = ran
    # seeds 1-3: one bug, three folders; seed 2 has the fewest ops (4, as seed 3), then the lowest seed
    chosen = folders[2][0]
    assert [minimized(folders[seed][0]) for seed in (1, 2, 3)] == [False, True, False]
    assert [folders[seed][1].get("minimized_as") for seed in (1, 3)] == [os.path.basename(chosen)] * 2
    assert "minimized_as" not in folders[2][1]
    text = markdown(str(findings))
    assert text.count(f"- same bug as `{chosen}`, minimized there") == 2
    assert f"| wrong_gradient | fake | MulBackward0 | 3 | 3 | gradients failing the rule: arg0 " \
           f"| `{os.path.basename(chosen)}` |" in text


def test_bugs_of_one_error_type_or_unlocalized_are_kept_apart(ran):
    findings, numbers, folders = ran
    # seeds 4 and 5 raise InductorError, for different reasons: two bugs, each minimized
    assert minimized(folders[4][0]) and minimized(folders[5][0])
    # seeds 6, 7 and 8 are unlocalized wrong gradients: their details say nothing of the bug (6 and 8 the
    # same but for leaves and counts), so each op set is minimized, and the minimized programs tell them apart
    assert minimized(folders[6][0]) and minimized(folders[7][0]) and minimized(folders[8][0])
    assert "minimized_as" not in folders[8][1]
    assert sorted(numbers["minimized"]) == sorted(folders[seed][0] for seed in (2, 4, 5, 6, 7, 8))
    bugs = [Finding.from_dict(folders[seed][1]).distinct_bug for seed in (6, 7, 8)]
    assert len(set(bugs)) == 3


def test_campaign_seconds_count_the_cases_not_the_minimization(ran):
    findings, numbers, folders = ran
    # nine cases found at once, then six minimizations of MINIMIZE_SECONDS each on two workers
    assert numbers["cases"] == 9 and numbers["seconds"] < MINIMIZE_SECONDS
    assert numbers["cases_per_second"] > 9 / MINIMIZE_SECONDS
    assert numbers["minimize_seconds"] >= 3 * MINIMIZE_SECONDS
    assert json.load(open(os.path.join(findings, "campaign.json"))) == numbers
    assert f"Then 6 folders minimized, one per distinct bug, in {numbers['minimize_seconds']} s." in markdown(
        str(findings))


def test_a_bug_minimized_by_an_earlier_campaign_is_not_minimized_again(tmp_path):
    campaign(tmp_path, [2]).run()
    later = campaign(tmp_path, [1, 3])
    numbers = later.run()
    folders = folders_by_seed(tmp_path)
    assert numbers["minimized"] == [] and not minimized(folders[1][0]) and not minimized(folders[3][0])
    assert folders[1][1]["minimized_as"] == folders[3][1]["minimized_as"] == os.path.basename(folders[2][0])


@pytest.mark.parametrize("limit, started", [(RESIDENT_MIB / 2, 3), (RESIDENT_MIB * 2, 1)])
def test_a_worker_past_its_memory_limit_is_replaced_after_its_case(tmp_path, limit, started):
    """Three cases on one worker that says it holds RESIDENT_MIB after each: under a lower limit the worker
    is replaced after each case but the last (three started), under a higher one it runs all three."""
    numbers = Campaign(engines=["eager"], findings=str(tmp_path), workers=1, seed_list=[9, 9, 9], progress=False,
                       worker_memory=limit, worker_main=fake_worker).run()
    assert numbers["cases"] == 3 and numbers["workers_started"] == started
