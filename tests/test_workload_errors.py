"""Broken workload files fail with one-line ConfigErrors (library) and exit code 2 (command line).

Each file in tests/data/broken_workloads/ starts with ``# expect: <substring of the error line>``."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpusim.cli import main
from gpusim.errors import ConfigError
from gpusim.workload import OpNode, load_workload
from gpusim.workload.graph import GraphError, order_nodes
from gpusim.workload.ops import Matmul

BROKEN = sorted((Path(__file__).parent / "data" / "broken_workloads").glob("*.yaml"))


def expected_substring(path: Path) -> str:
    first_line = path.read_text().splitlines()[0]
    assert first_line.startswith("# expect: "), f"{path.name} must start with '# expect: '"
    return first_line.removeprefix("# expect: ").strip()


def test_corpus_is_large_and_distinct():
    assert len(BROKEN) >= 12
    assert len({expected_substring(p) for p in BROKEN}) == len(BROKEN)


@pytest.mark.parametrize("path", BROKEN, ids=lambda p: p.stem)
def test_library_raises_one_line_config_error(path):
    with pytest.raises(ConfigError) as info:
        load_workload(path)
    text = str(info.value)
    assert "\n" not in text
    assert text.startswith(str(path))
    assert expected_substring(path) in text


@pytest.mark.parametrize("path", BROKEN[:6], ids=lambda p: p.stem)
def test_check_command_exits_2(path, capsys):
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and expected_substring(path) in err[0]


def test_file_order_unless_after(tmp_path):
    f = tmp_path / "w.yaml"
    f.write_text("schema_version: 1\nname: x\nops:\n"
                 "  - {name: a, op: matmul, m: 8, n: 8, k: 8, dtype: bf16, after: [c]}\n"
                 "  - {name: b, op: matmul, m: 8, n: 8, k: 8, dtype: bf16, after: []}\n"
                 "  - {name: c, op: softmax, rows: 8, cols: 8, dtype: bf16, after: []}\n"
                 "  - {name: d, op: softmax, rows: 8, cols: 8, dtype: bf16}\n")
    w = load_workload(f)
    assert [n.name for n in w.graph.nodes] == ["b", "c", "a", "d"]
    assert w.graph.node("d").after == ("c",)


def test_set_overrides_for_op_lists_and_their_errors():
    w = load_workload("gemm_8192_bf16", ["ops.gemm.m=4096"])
    assert w.graph.nodes[0].op.m == 4096
    with pytest.raises(ConfigError, match="--set: batch_size"):
        load_workload("gpt3_175b_train", ["batch_size=0"])
    with pytest.raises(ConfigError, match="--set: config.num_layers"):
        load_workload("gpt3_175b_train", ["config.num_layers=-1"])


def test_graph_errors():
    op = Matmul(m=1, n=1, k=1)
    with pytest.raises(GraphError, match="cycle: a -> c -> b -> a|cycle: b -> a -> c -> b|cycle"):
        order_nodes([OpNode("a", op, ("c",)), OpNode("b", op, ("a",)), OpNode("c", op, ("b",))])
    with pytest.raises(GraphError, match="does not exist"):
        order_nodes([OpNode("a", op, ("zz",))])


def test_unknown_builtin_name():
    with pytest.raises(ConfigError, match="did you mean"):
        load_workload("gpt3_175b_trian")
