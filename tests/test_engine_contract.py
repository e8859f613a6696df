"""The `gpusim run` contract: every built-in description and workload, the JSON keys, conservation,
determinism, traces, launch regimes, memory oversubscription and CPU runs."""

import json
import math

import pytest

from gpusim.cli import main
from gpusim.config import list_hardware, load_hardware
from gpusim.engine.simulate import simulate
from gpusim.errors import SimulationError
from gpusim.workload import list_workloads, load_workload

HARDWARE = [name for name, _ in list_hardware()]
WORKLOADS = [name for name, _ in list_workloads()]
SINGLE_DEVICES = [h for h in HARDWARE if load_hardware(h).kind != "system"]
SYSTEMS = [h for h in HARDWARE if load_hardware(h).kind == "system"]
KERNEL_KEYS = {"name", "op", "start_s", "time_s", "flop", "dram_bytes", "l2_hit_fraction", "achieved_flop_per_s",
               "bound", "grid", "threads_per_cta", "ctas_per_sm"}


def run_json(capsys, *args):
    code = main(["run", *args, "--json", "-"])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("workload", WORKLOADS)
def test_every_workload_runs_on_h100(capsys, workload):
    code, out, err = run_json(capsys, "h100_sxm5_80gb", workload)
    if code == 2:  # a collective that needs a system: one line, no traceback
        assert err.count("\n") == 1 and "Traceback" not in err and "system" in err
        return
    assert code == 0, err
    data = json.loads(out)
    assert data["total_time_s"] > 0
    assert isinstance(data["fits_in_memory"], bool) and data["peak_memory_bytes"] > 0
    for k in data["kernels"]:
        assert KERNEL_KEYS <= set(k) or k["op"] in ("host_to_device", "device_to_host")
        assert k["bound"] in ("compute", "memory", "latency", "launch")
    if "model" in load_workload(workload).kind:
        for key in ("step_time_s", "samples_per_s", "mfu_fraction"):
            assert data[key] > 0
        assert 0 < data["mfu_fraction"] < 1


@pytest.mark.parametrize("hardware", SINGLE_DEVICES)
@pytest.mark.parametrize("workload", ["gemm_8192_bf16", "mlp_mnist", "attention_fused_bf16", "softmax_bf16"])
def test_every_device_runs_the_small_workloads(capsys, hardware, workload):
    code, out, err = run_json(capsys, hardware, workload)
    if code == 2:  # a dtype the device lacks is one line, not a traceback
        assert err.count("\n") == 1 and "Traceback" not in err
        return
    assert code == 0, err
    assert json.loads(out)["total_time_s"] > 0


@pytest.mark.parametrize("system", SYSTEMS)
def test_every_system_runs_the_all_reduce(capsys, system):
    code, out, err = run_json(capsys, system, "all_reduce_1gib")
    assert code == 0, err
    data = json.loads(out)
    assert data["total_time_s"] > 0 and data["busbw_bytes_per_s"] > 0


def test_an_nvls_all_reduce_reports_its_loops_and_reads_back(capsys):
    from gpusim.report.data import result_from_dict

    # 1 GiB over 16 NVLS channels x 8 GPUs: not under 64 x 128 x 128 KiB = 1 GiB, so 128 KiB chunks,
    # 1 GiB / (128 x 128 KiB) = 64 loops
    code, out, err = run_json(capsys, "dgx_h100", "all_reduce_1gib")
    assert code == 0, err
    data = json.loads(out)
    assert data["collective_algorithm"] == "nvls/Simple" and data["collective_loops"] == 64
    assert result_from_dict(data).collective_loops == 64
    assert main(["run", "dgx_h100", "all_reduce_1gib"]) == 0
    assert "nvls/Simple in 64 loops: " in capsys.readouterr().out


def test_flop_and_bytes_are_conserved_between_workload_and_result():
    wl = load_workload("bert_base_train")
    result = simulate(load_hardware("a100_sxm4_80gb"), wl, record_spans=False)
    expected = sum(n.op.flop() * n.repeat for n in wl.graph.nodes)
    assert math.isclose(result.total_flop, expected, rel_tol=1e-9)
    # DRAM traffic is at least every kernel's minimum traffic (inputs read once, outputs written once)
    min_bytes = sum((n.op.bytes_read() + n.op.bytes_written()) * n.repeat for n in wl.graph.nodes
                    if n.op.category not in ("transfer", "collective") and n.op.kind != "attention")
    got = sum(k.dram_bytes for k in result.kernels if k.op not in ("attention", "host_to_device", "device_to_host"))
    assert got >= min_bytes * (1 - 1e-9)


def test_two_runs_give_identical_results():
    hw, wl = load_hardware("h100_sxm5_80gb"), load_workload("llama2_7b_train")
    assert simulate(hw, wl).to_dict() == simulate(hw, wl).to_dict()


def test_trace_is_chrome_trace_json_with_device_tracks(tmp_path, capsys):
    trace = tmp_path / "t.json"
    assert main(["run", "h100_sxm5_80gb", "mlp_block_chain", "--trace", str(trace)]) == 0
    capsys.readouterr()
    events = json.loads(trace.read_text())["traceEvents"]
    names = {e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    assert {"host", "stream 0", "SMs", "L2", "HBM", "host link"} <= names
    spans = [e for e in events if e["ph"] == "X"]
    assert spans and all(e["dur"] >= 0 for e in spans)
    assert any(e["ph"] == "C" for e in events)  # counter tracks (HBM utilization, L2 hit, occupancy)


def test_small_kernels_are_launch_bound_in_eager_mode_and_graphs_help():
    hw, wl = load_hardware("h100_sxm5_80gb"), load_workload("mlp_mnist")
    eager = simulate(hw, wl, launch_mode="eager")
    graph = simulate(hw, wl, launch_mode="graph")
    assert any(k.bound == "launch" for k in eager.kernels)
    # each eager launch costs 10 us of host time; a graph replay 2 us of device time
    launches = sum(k.repeat for k in eager.kernels if k.op not in ("host_to_device", "device_to_host"))
    assert eager.total_time_s >= launches * hw.gpu.launch.kernel_launch_s
    # a replayed graph runs its kernels back to back, each after its 2 us device-side launch: the
    # 8 us of host time per kernel that bound the eager run are gone
    saved_s = launches * (hw.gpu.launch.kernel_launch_s - hw.gpu.launch.graph_kernel_launch_s)
    device_s = sum(k.time_s * k.repeat for k in graph.kernels) + launches * hw.gpu.launch.graph_kernel_launch_s
    assert graph.total_time_s < eager.total_time_s
    assert graph.total_time_s <= device_s * (1 + 1e-9)
    assert eager.total_time_s - graph.total_time_s >= 0.5 * saved_s


def test_native_launches_space_launch_bound_kernels_by_the_native_launch_cost(tmp_path):
    # 50 element-wise ops of 256 values each: every kernel is shorter than any host launch cost, so the
    # stream waits on the host and the run is 50 launches plus the last kernel
    ops = "\n".join(f"  - {{name: add{i}, op: elementwise, function: add, num_elements: 256, dtype: fp32}}"
                     for i in range(50))
    path = tmp_path / "tiny_ops.yaml"
    path.write_text(f"schema_version: 1\nname: tiny-ops\nops:\n{ops}\n")
    hw, wl = load_hardware("h100_sxm5_80gb"), load_workload(str(path))
    launch = hw.gpu.launch
    runs = {mode: simulate(hw, wl, launch_mode=mode, record_spans=False) for mode in ("eager", "native", "graph")}
    native = runs["native"]
    last = max(native.kernels, key=lambda k: k.start_s)
    assert last.time_s < launch.native_kernel_launch_s
    assert native.total_time_s == pytest.approx(50 * launch.native_kernel_launch_s + last.time_s)
    assert runs["graph"].total_time_s < native.total_time_s < runs["eager"].total_time_s


def test_the_native_launch_mode_needs_its_launch_cost():
    hw = load_hardware("xeon_8480")
    assert hw.cpu.launch.native_kernel_launch_s is None
    with pytest.raises(SimulationError, match="native_kernel_launch_s is not set"):
        simulate(hw, load_workload("mlp_mnist"), launch_mode="native")


def test_a_workload_that_does_not_fit_is_reported_and_unified_memory_pages_it():
    hw = load_hardware("h100_sxm5_80gb")
    wl = load_workload("llama2_7b_train", ["batch_size=32"])
    plain = simulate(hw, wl)
    assert not plain.fits_in_memory and any("does not fit" in w for w in plain.warnings)
    paged = simulate(hw, wl, unified_memory=True)
    assert paged.total_time_s > plain.total_time_s * 1.5  # PCIe paging is far slower than HBM
    assert paged.time_breakdown_s["paging"] > 0


def test_cpu_and_gpu_run_the_same_workload_through_one_model():
    wl = load_workload("resnet50_inference")
    cpu = simulate(load_hardware("xeon_8480"), wl, record_spans=False)
    gpu = simulate(load_hardware("h100_sxm5_80gb"), wl, record_spans=False)
    assert cpu.total_time_s > 5 * gpu.total_time_s
    assert math.isclose(cpu.total_flop, gpu.total_flop, rel_tol=1e-9)


def test_host_to_device_copy_overlaps_compute_on_the_copy_engine():
    # the copy engine and the compute stream are separate: an input copy with no dependency on the
    # preceding GEMM overlaps it, so the total is less than their sum
    from gpusim.workload.graph import OpNode, WorkloadGraph
    from gpusim.workload.ops import HostToDevice, Matmul

    hw = load_hardware("h100_sxm5_80gb")
    base = load_workload("gemm_8192_bf16")
    gemm = OpNode(name="gemm", op=Matmul(m=8192, n=8192, k=8192, dtype="bf16"))
    copy = OpNode(name="copy", op=HostToDevice(num_bytes=2**30, dtype="bf16"))
    from dataclasses import replace

    wl = replace(base, graph=WorkloadGraph(nodes=(gemm, copy)))
    result = simulate(hw, wl)
    times = {k.op: k.time_s for k in result.kernels}
    assert result.total_time_s < times["matmul"] + times["host_to_device"]


def test_a_multi_gpu_trace_has_a_process_per_gpu_with_its_compute_and_ports(tmp_path, capsys):
    trace = tmp_path / "t.json"
    assert main(["run", "dgx_h100", "llama2_7b_train", "--set", "config.num_layers=4", "--set", "parallelism.data=2",
                 "--set", "parallelism.tensor=2", "--set", "parallelism.pipeline=2",
                 "--set", "parallelism.microbatches=4", "--trace", str(trace)]) == 0
    capsys.readouterr()
    events = json.loads(trace.read_text())["traceEvents"]
    processes = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    # Megatron-LM's rank order: tensor fastest, then data, then pipeline
    assert processes[1] == "GPU 0 (stage 0, data 0, tensor 0)"
    assert processes[4] == "GPU 3 (stage 0, data 1, tensor 1)"
    assert processes[8] == "GPU 7 (stage 1, data 1, tensor 1)"
    assert len(processes) == 8
    for pid in processes:  # each GPU declares the tracks it uses, no others
        declared = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name" and e["pid"] == pid}
        used = {e["tid"] for e in events if e["ph"] == "X" and e["pid"] == pid}
        assert set(declared) == used
        assert sorted(declared.values()) == ["NVLink port", "compute", "layers"]

    def spans(pid, track):
        tid = next(e["tid"] for e in events if e["name"] == "thread_name" and e["pid"] == pid
                   and e["args"]["name"] == track)
        return [(e["name"], e["ts"], e["dur"]) for e in events if e["ph"] == "X" and e["pid"] == pid and e["tid"] == tid]

    # the GPUs of a stage are identical; the stages differ
    assert spans(1, "compute") == spans(4, "compute") != spans(5, "compute")
    # 4 micro-batches forward and backward, and the optimizer, on every GPU
    assert sum(name[0] in "FB" for name, _, _ in spans(5, "compute")) == 8
    # and each pass's layers on the layers track: stage 1 has blocks 2 and 3 and the head
    assert [name for name, _, _ in spans(5, "layers")][:3] == ["F0 layer 2", "F0 layer 3", "F0 head"]
    assert len(spans(5, "layers")) == 8 * 3
    # a pipeline send shows on the sender's port and the receiver's, at the same time
    sent = [(ts, dur) for name, ts, dur in spans(1, "NVLink port") if name == "send_recv F0"]
    received = [(ts, dur) for name, ts, dur in spans(5, "NVLink port") if name == "send_recv F0 from stage 0"]
    assert len(sent) == 1 and sent == received


def test_a_trace_above_64_gpus_has_a_process_per_pipeline_stage(tmp_path, capsys):
    trace = tmp_path / "t.json"
    assert main(["run", "dgx_h100", "llama2_7b_train", "--set", "num_nodes=16", "--set", "config.num_layers=4",
                 "--set", "parallelism.data=64",
                 "--set", "parallelism.pipeline=2", "--set", "parallelism.microbatches=2", "--trace", str(trace)]) == 0
    capsys.readouterr()
    events = json.loads(trace.read_text())["traceEvents"]
    processes = [e["args"]["name"] for e in events if e["name"] == "process_name"]
    assert processes == ["GPUs 0-63 (stage 0: 64 identical GPUs, one shown)",
                         "GPUs 64-127 (stage 1: 64 identical GPUs, one shown)"]


def test_a_tensor_parallel_inference_trace_shows_one_rank_for_all(tmp_path, capsys):
    trace = tmp_path / "t.json"
    assert main(["run", "dgx_h100", "llama2_7b_inference", "--set", "config.num_layers=2", "--set", "generate_len=4",
                 "--set", "parallelism.tensor=2", "--trace", str(trace)]) == 0
    capsys.readouterr()
    events = json.loads(trace.read_text())["traceEvents"]
    assert [e["args"]["name"] for e in events if e["name"] == "process_name"] == [
        "dgx_h100: llama2-7b-inference: GPUs 0-1 (2 identical ranks, one shown)"]
    assert {e["pid"] for e in events} == {1}


@pytest.mark.parametrize("workload,items", [
    ("llama2_7b_inference", ["parallelism.tensor=2"]),
    ("mixtral_8x7b_inference", ["parallelism.tensor=2"]),
    ("llama2_7b_inference", ["parallelism.tensor=2", "parallelism.pipeline=2"]),
])
def test_inference_collectives_sit_on_the_timeline_between_the_kernels(workload, items):
    from gpusim.config import load_hardware
    from gpusim.engine.cluster import simulate_system
    from gpusim.workload import load_workload

    layers, steps = 2, 4
    wl = load_workload(workload, [f"config.num_layers={layers}", f"generate_len={steps}", *items])
    r = simulate_system(load_hardware("dgx_h100"), wl, record_spans=True)
    comm = [s for s in r.spans if s.track in ("NVLink port", "network port")]
    calls = {label: sum(dict(s.args)["calls"] for s in comm if label in s.name)
             for label in ("tensor parallel", "pipeline send")}
    # 2 L + 1 all-reduces per token pass (the prompt, then each decoded token), p - 1 sends per pass
    passes = 1 + steps
    pipeline = r.parallelism["pipeline"]
    assert calls == {"tensor parallel": (2 * layers + 1) * passes, "pipeline send": (pipeline - 1) * passes}
    assert sum(s.end_s - s.start_s for s in comm) == pytest.approx(r.time_breakdown_s["exposed_communication"])
    # nothing overlaps on the rank's timeline: kernels and collectives follow each other to the end
    busy = sorted([(k.start_s, k.start_s + k.time_s) for k in r.kernels] + [(s.start_s, s.end_s) for s in comm])
    assert all(b[0] >= a[1] - 1e-12 for a, b in zip(busy, busy[1:]))
    assert busy[-1][1] == pytest.approx(r.total_time_s)
    # a pipeline send follows the last layer of the first stage, whose kernel ends where it starts
    for span in (s for s in comm if "pipeline send" in s.name):
        before = max((k for k in r.kernels if k.start_s + k.time_s <= span.start_s + 1e-12),
                     key=lambda k: k.start_s + k.time_s)
        assert f".layer{layers // pipeline - 1}." in before.node


@pytest.mark.parametrize(("hw", "wl", "launch"), [("h100_sxm5_80gb", "mlp_mnist", "eager"),
                                                  ("h100_sxm5_80gb", "mlp_mnist", "graph"),
                                                  ("h100_sxm5_80gb", "resnet50_inference", "native"),
                                                  ("xeon_8480", "resnet50_inference", "eager")])
def test_the_time_breakdown_partitions_the_run(hw, wl, launch):
    """Every instant of a single-device run is in one category: a kernel's bound, paging, launch (the
    host's launches and the device-side gaps) or transfer (the stream waiting on copies)."""
    result = simulate(load_hardware(hw), load_workload(wl), launch_mode=launch, record_spans=False)
    assert sum(result.time_breakdown_s.values()) == pytest.approx(result.total_time_s, rel=1e-9)
    assert all(v >= 0 for v in result.time_breakdown_s.values())
    launches = sum(k.repeat for k in result.kernels if k.op not in ("host_to_device", "device_to_host"))
    assert result.time_breakdown_s["launch"] >= launches * hw_gap(hw) * (1 - 1e-9)


def hw_gap(name: str) -> float:
    """The device-side gap every launch pays at least (all but the first, which waits on the host)."""
    launch = load_hardware(name)
    launch = launch.cpu.launch if launch.kind == "cpu" else launch.gpu.launch
    return launch.graph_kernel_launch_s
