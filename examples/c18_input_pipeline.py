"""C18: "The CPU must feed the GPU over PCIe; data preprocessing on the CPU can starve the GPU."
Two training steps whose input batch is copied host-to-device every step, on a PCIe Gen3 V100 and a PCIe Gen5 H100:
ResNet-50 (batch 256, 224x224 images: much compute per input byte) and an MNIST MLP (batch 8192: little compute
per input byte).

1. Synchronous input (the model workloads as written: the step's first op is the host-to-device copy and
   everything waits for it): copy time and the share of the step the SMs sit idle.
2. Prefetched input (the copy of batch i+1 runs on the copy engine while step i computes, two input buffers):
   simulated by the engine with an ops workload of several steps, each a host_to_device copy of the real batch
   bytes and a GEMM chain standing in for the step's GPU work (same duration as the simulated model step); the
   copy engine runs concurrently with the compute stream, so the step costs max(copy, compute).
3. Host preprocessing (JPEG decode + augmentation on the CPU), which the simulator does not model as ops: the
   rate the GPU consumes images at vs what a dual-socket host can produce at an ASSUMED per-core rate
   (HOST_IMAGES_PER_S_PER_CORE below, not a measurement; change it to your pipeline's number)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402
from gpusim.engine.kernel import simulate_kernel  # noqa: E402
from gpusim.engine.machine import machine_of  # noqa: E402
from gpusim.mapping import best_gemm  # noqa: E402
from gpusim.workload import load_workload  # noqa: E402

DEVICES = ("v100_pcie_32gb", "h100_pcie_80gb")
WORKLOADS = {"resnet50_train": [], "mlp_mnist": ["batch_size=8192"]}
PROXY_GEMM = 2048  # square BF16 GEMM repeated to stand in for a step's GPU work
HOST_IMAGES_PER_S_PER_CORE = 200.0
"""ASSUMED rate of JPEG decode + random-resized-crop + flip per CPU core for ImageNet-size images; an assumption for
illustration, not a measured figure."""
HOST_SYSTEM = "dgx_h100"  # host cores per GPU taken from this system: 2 Xeon 8480 (56 cores each) for 8 GPUs


def pipelined_ops_yaml(path: Path, input_bytes: float, proxy_repeat: int, num_steps: int) -> Path:
    lines = ["schema_version: 1", "name: prefetched-input-pipeline",
             "description: input copies on the copy engine overlapped with the previous step's compute", "ops:"]
    for i in range(num_steps):
        after_in = f"[step{i - 2}]" if i >= 2 else "[]"  # two input buffers: refill the one step i-2 used
        after_step = f"[in{i}, step{i - 1}]" if i else f"[in{i}]"
        lines.append(f"  - {{name: in{i}, op: host_to_device, num_bytes: {input_bytes:.0f}, after: {after_in}}}")
        lines.append(f"  - {{name: step{i}, op: matmul, m: {PROXY_GEMM}, n: {PROXY_GEMM}, k: {PROXY_GEMM}, dtype: bf16, "
                     f"repeat: {proxy_repeat}, after: {after_step}}}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def main(quick: bool = False, out_dir: Path = Path("example-output")) -> dict:
    num_steps = 3 if quick else 8
    rows = {}
    for hw in DEVICES:
        desc = C.load_hardware(hw)
        machine = machine_of(desc)
        link = desc.gpu.host_link
        gemm_s = simulate_kernel(best_gemm(machine, "proxy", "matmul", PROXY_GEMM, PROXY_GEMM, PROXY_GEMM, 1, "bf16",
                                           2.0 * PROXY_GEMM ** 3), machine).time_s
        for wl, ov in WORKLOADS.items():
            _, r = C.run(hw, wl, *ov)
            copy_s = r.time_breakdown_s["transfer"]
            workload = load_workload(wl, ov)
            input_bytes = sum(n.op.num_bytes for n in workload.graph.nodes if n.op.kind == "host_to_device")
            serial_s = r.total_time_s
            gpu_s = serial_s - copy_s
            repeat = max(1, round(gpu_s / (gemm_s + machine.graph_kernel_launch_s)))
            totals = []
            for n in (num_steps, 2 * num_steps):  # steady state: the extra time of num_steps more steps
                ops = pipelined_ops_yaml(out_dir / f"c18_{hw}_{wl}_{n}.yaml", input_bytes, repeat, n)
                totals.append(C.run(hw, str(ops))[1].total_time_s)
            proxy_step_s = repeat * (gemm_s + machine.graph_kernel_launch_s)
            pipelined_s = (totals[1] - totals[0]) / num_steps
            samples = workload.samples_per_step
            rows[f"{hw}/{wl}"] = {
                "device": hw, "workload": wl, "pcie_generation": link.generation,
                "host_link_bytes_per_s": machine.host_link_achievable_bytes_per_s, "input_bytes": input_bytes,
                "copy_s": copy_s, "gpu_s": gpu_s, "serial_step_s": serial_s, "serial_idle_fraction": copy_s / serial_s,
                "proxy_step_s": proxy_step_s, "pipelined_step_s": pipelined_s,
                "pipelined_idle_fraction": max(0.0, 1 - proxy_step_s / pipelined_s),
                "samples_per_step": samples, "gpu_samples_per_s": samples / gpu_s}
    print(f"{'device':<16} {'workload':<15} PCIe {'input MB':>8} {'copy ms':>8} {'GPU ms':>8} {'sync idle':>9} "
          f"{'prefetch step ms':>16} {'prefetch idle':>13}")
    for r in rows.values():
        print(f"{r['device']:<16} {r['workload']:<15} Gen{r['pcie_generation']} {r['input_bytes'] / 1e6:>8.1f} "
              f"{r['copy_s'] * 1e3:>8.3f} {r['gpu_s'] * 1e3:>8.3f} {r['serial_idle_fraction']:>9.1%} "
              f"{r['pipelined_step_s'] * 1e3:>16.3f} {r['pipelined_idle_fraction']:>13.1%}")

    host = C.load_hardware(HOST_SYSTEM)
    host_cores = host.num_cpus_per_node * host.host_cpu.num_cores // host.num_gpus_per_node
    host_rate = HOST_IMAGES_PER_S_PER_CORE * host_cores
    prep = {}
    print(f"\nhost preprocessing (assumed {HOST_IMAGES_PER_S_PER_CORE:.0f} images/s per core x {host_cores} cores per GPU as in {HOST_SYSTEM} = "
          f"{host_rate:,.0f} images/s):")
    for hw in DEVICES:
        r = rows[f"{hw}/resnet50_train"]
        need = r["gpu_samples_per_s"]
        idle = max(0.0, 1 - host_rate / need)
        prep[hw] = {"gpu_images_per_s": need, "cores_needed": need / HOST_IMAGES_PER_S_PER_CORE, "idle_fraction": idle}
        print(f"  {hw:<16} ResNet-50 consumes {need:8,.0f} images/s -> needs {need / HOST_IMAGES_PER_S_PER_CORE:5.0f} "
              f"cores; GPU idle {idle:.0%} of the time with {host_cores} cores per GPU")

    labels = list(rows)
    C.bar_chart(out_dir / "c18_input_pipeline.png", "C18: share of the step the GPU waits for input",
                [k.replace("/", "\n") for k in labels],
                {"synchronous copy": [rows[k]["serial_idle_fraction"] * 100 for k in labels],
                 "prefetched copy": [rows[k]["pipelined_idle_fraction"] * 100 for k in labels]},
                "GPU idle (% of step)", "device / workload")

    v_mlp, h_mlp = rows["v100_pcie_32gb/mlp_mnist"], rows["h100_pcie_80gb/mlp_mnist"]
    v_rn, h_rn = rows["v100_pcie_32gb/resnet50_train"], rows["h100_pcie_80gb/resnet50_train"]
    link_ratio = h_mlp["host_link_bytes_per_s"] / v_mlp["host_link_bytes_per_s"]
    starved = max(prep.values(), key=lambda x: x["idle_fraction"])
    ok = v_mlp["serial_idle_fraction"] > 0.2 and starved["idle_fraction"] > 0.2
    text = (f"with synchronous copies the MNIST MLP's GPU waits {v_mlp['serial_idle_fraction']:.0%} of each step on "
            f"PCIe Gen3 (V100) and {h_mlp['serial_idle_fraction']:.0%} on Gen5 (H100, {link_ratio:.1f}x the link but "
            f"the GPU is faster too), ResNet-50 only {v_rn['serial_idle_fraction']:.1%} / {h_rn['serial_idle_fraction']:.1%}; "
            f"prefetching on the copy engine cuts the MLP's idle share to {v_mlp['pipelined_idle_fraction']:.0%} / "
            f"{h_mlp['pipelined_idle_fraction']:.0%}; the H100 consumes {prep['h100_pcie_80gb']['gpu_images_per_s']:,.0f} "
            f"ResNet-50 images/s, {prep['h100_pcie_80gb']['cores_needed']:.0f} cores at an assumed "
            f"{HOST_IMAGES_PER_S_PER_CORE:.0f} images/s per core, so host preprocessing leaves it idle "
            f"{prep['h100_pcie_80gb']['idle_fraction']:.0%} of the time with {host_cores} host cores per GPU")
    return {"rows": rows, "preprocessing": prep, "link_ratio": link_ratio, "host_cores_per_gpu": host_cores,
            "verdict": C.verdict("confirmed" if ok else "qualified", text)}


if __name__ == "__main__":
    C.cli(main)
