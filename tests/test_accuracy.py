"""Accuracy against the published dataset must not regress past the recorded MAPE.

The recorded values live in measurements/published/accuracy_recorded.json; re-record them on purpose
(and say why in the commit) when the model improves: `python -m gpusim accuracy --json -`.
"""

import json
from pathlib import Path

import pytest

from gpusim.accuracy import op_group, run_accuracy, summarize
from gpusim.accuracy_cluster import run_communication, run_training
from gpusim.measurements import load_communication_cases, load_kernel_cases, load_training_cases, published_dir

RECORDED = json.loads((Path(published_dir()) / "accuracy_recorded.json").read_text())
TOLERANCE = 0.005  # half a percentage point of MAPE


@pytest.fixture(scope="module")
def kernel_results():
    results, skipped = run_accuracy(load_kernel_cases())
    return results, skipped


def test_kernel_mape_does_not_regress(kernel_results):
    results, _ = kernel_results
    summaries = {s.group: s for s in summarize(results) + summarize(results, op_group)}
    for group, recorded in RECORDED["kernels"].items():
        assert summaries[group].mape_fraction <= recorded + TOLERANCE, group


def test_simulation_beats_the_plain_roofline(kernel_results):
    results, _ = kernel_results
    for s in summarize(results, op_group):
        if s.roofline_mape_fraction is not None:
            assert s.mape_fraction < s.roofline_mape_fraction / 2, s.group


def test_every_case_is_simulated_or_skipped_with_a_reason(kernel_results):
    results, skipped = kernel_results
    assert len(results) + len(skipped) == len(load_kernel_cases())
    assert all(s.reason for s in skipped)
    assert not [s for s in skipped if s.reason.startswith("cannot simulate")]


def test_latencies_within_ten_percent(kernel_results):
    results, _ = kernel_results
    latency = [r for r in results if r.op == "pointer_chase"]
    assert latency and sum(abs(r.signed_error_fraction) for r in latency) / len(latency) <= 0.10


def test_collective_mape_meets_its_target_and_does_not_regress():
    results, _ = run_communication(load_communication_cases())
    mape = summarize(results)[0].mape_fraction
    assert mape <= 0.12
    assert mape <= RECORDED["communication"]["all"] + TOLERANCE


def test_training_mape_does_not_regress():
    results, _ = run_training(load_training_cases())
    assert len(results) >= 20
    assert summarize(results)[0].mape_fraction <= RECORDED["training"]["all"] + TOLERANCE
