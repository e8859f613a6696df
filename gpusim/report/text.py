"""One-line text summaries of a simulation result, shared by ``gpusim run`` and ``gpusim report``."""

from __future__ import annotations

from gpusim.units import format_duration, format_rate, plural


def launch_summary(result) -> str:
    """Kernel launches (each record's repeats counted), distinct kernels and launch mode of a result."""
    launches = sum(max(1, int(k.repeat)) for k in result.kernels)
    return (f"{plural(launches, 'kernel launch', 'kernel launches')}, "
            f"{plural(result.num_unique_kernels, 'distinct kernel')}, launch {result.launch_mode}")


def step_summary(result) -> str:
    """Step time, samples/s (tokens/s) and MFU of a model workload's result, with their digits kept."""
    text = f"step {format_duration(result.step_time_s)}, {format_rate(result.samples_per_s)} samples/s"
    if result.tokens_per_s:
        text += f", {format_rate(result.tokens_per_s)} tokens/s"
    mfu = result.mfu_fraction
    return text + (f", MFU {mfu:.1%}" if mfu >= 0.001 or mfu == 0 else f", MFU {mfu * 100:.2g}%")
