"""``gpusim workload list | show``."""

from __future__ import annotations

import json

import pytest

from gpusim.cli import main


def test_list(capsys):
    assert main(["workload", "list"]) == 0
    out = capsys.readouterr().out
    for name in ("gpt3_175b_train", "llama2_7b_inference", "resnet50_train", "gemm_8192_bf16"):
        assert name in out


def test_show_json_has_contract_keys(capsys):
    assert main(["workload", "show", "bert_large_train", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["num_parameters"] > 3e8
    assert info["flop_per_step"] > 0 and info["num_kernels"] > 0
    for key in ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes", "total_bytes"):
        assert info["memory"][key] >= 0


def test_show_text_with_hardware(capsys):
    assert main(["workload", "show", "llama2_7b_inference", "--hw", "h100_sxm5_80gb"]) == 0
    out = capsys.readouterr().out
    assert "matmul" in out and "decode" in out and "fits" in out


def test_show_names_the_fullest_pipeline_stage(capsys):
    # one micro-batch in flight on every stage: the last, with the head's logits, is fullest
    assert main(["workload", "show", "llama2_7b_train", "--set", "parallelism.pipeline=4"]) == 0
    assert "memory per GPU (pipeline stage 3, the fullest):" in capsys.readouterr().out
    assert main(["workload", "show", "llama2_7b_train", "--set", "parallelism.pipeline=4", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["memory"]["pipeline_stage"] == 3
    # and lists every stage's footprint, the fullest among them
    assert [st["pipeline_stage"] for st in info["memory_by_stage"]] == [0, 1, 2, 3]
    assert max(st["total_bytes"] for st in info["memory_by_stage"]) == info["memory"]["total_bytes"]
    assert main(["workload", "show", "llama2_7b_train", "--set", "parallelism.pipeline=4"]) == 0
    lines = capsys.readouterr().out.splitlines()
    table = lines[lines.index("  per pipeline stage:") + 1:][:5]
    assert table[0].split()[0] == "stage" and [row.split()[0] for row in table[1:]] == ["0", "1", "2", "3"]


def test_show_set_error_exit_2(capsys):
    assert main(["workload", "show", "gpt3_175b_train", "--set", "precision=fp9"]) == 2
    assert "precision" in capsys.readouterr().err


def test_run_set_null_unsets_a_workload_key(capsys):
    # a training workload run as inference: its optimizer must be unset with --set optimizer=null
    args = ["run", "h100_sxm5_80gb", "bert_large_train", "--set", "mode=inference", "--set", "optimizer=null",
            "--set", "config.head=classifier", "--json", "-"]
    assert main(args) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["total_time_s"] > 0
    assert not any(k["op"] == "optimizer_update" for k in result["kernels"])


def test_accuracy_all_suites_json_holds_every_suite(tmp_path):
    path = tmp_path / "accuracy.json"
    assert main(["accuracy", "--json", str(path)]) == 0
    report = json.loads(path.read_text())
    assert report["cases"] and report["summary"]["all"]["num_cases"] == len(report["cases"])
    for suite in ("communication", "training"):
        assert report[suite]["cases"], suite
        assert all("signed_error_fraction" in c for c in report[suite]["cases"])
    # the kernel cases grouped by the reference they come from: every case in exactly one group, each
    # group's MAPE the mean of its cases' absolute errors
    by_source = report["by_source"]
    assert sum(g["num_cases"] for g in by_source.values()) == len(report["cases"])
    xla = [abs(c["signed_error_fraction"]) for c in report["cases"] if c["source"].startswith("ROCm/xla@")]
    assert by_source["ROCm/xla"]["num_cases"] == len(xla) > 0
    assert by_source["ROCm/xla"]["mape_fraction"] == pytest.approx(sum(xla) / len(xla))
