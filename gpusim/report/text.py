"""One-line text summaries of a simulation result, shared by ``gpusim run`` and ``gpusim report``."""

from __future__ import annotations

from gpusim.units import format_duration, format_rate, format_usd, plural


def launch_summary(result) -> str:
    """Kernel launches (each record's repeats counted), distinct kernels and launch mode of a result."""
    from gpusim.energy import HOST_LINK_OP_KINDS

    copies = sum(max(1, int(k.repeat)) for k in result.kernels
                 if k.on_link and k.op in HOST_LINK_OP_KINDS)
    collectives = result.num_link_ops - copies
    text = f"{plural(result.num_kernel_launches, 'kernel launch', 'kernel launches')}"
    if representative_block(result):
        text += " in one representative block of the step"
    if result.num_kernel_launches:
        text += f", {plural(result.num_unique_kernels, 'distinct kernel')}"
    text += f", {plural(copies, 'host copy', 'host copies')}" if copies else ""
    text += f", {plural(collectives, 'collective')}" if collectives else ""
    return f"{text}, launch {result.launch_mode}"


def step_summary(result) -> str:
    """Step time, samples/s (tokens/s) and MFU of a model workload's result, with their digits kept."""
    text = f"step {format_duration(result.step_time_s)}, {format_rate(result.samples_per_s)} samples/s"
    if result.tokens_per_s:
        text += f", {format_rate(result.tokens_per_s)} tokens/s"
    mfu = result.mfu_fraction
    if mfu is None:  # no peak in the workload's precision (a warning says why)
        return text + ", MFU -"
    return text + (f", MFU {mfu:.1%}" if mfu >= 0.001 or mfu == 0 else f", MFU {mfu * 100:.2g}%")


def representative_block(result) -> bool:
    """Whether the result's kernel records are one representative block of a multi-GPU training step
    (the step repeats them), not every kernel of the step."""
    from gpusim.energy import representative_scale

    return representative_scale(result) > 1.0


def layout_summary(result) -> str | None:
    """The GPUs and parallel layout of a multi-GPU result (None for a single device)."""
    par = result.parallelism
    if not par:
        return None
    flags = [name for key, name in (("sequence_parallel", "sequence parallel"),
                                    ("tp_comm_overlap", "tensor-parallel collectives overlapped"))
             if par.get(key) and par.get("tensor", 1) > 1]
    comm = {"a2a": "Ulysses all-to-all", "all_gather": "gathered keys and values",
            "a2a+p2p": f"all-to-all in groups of {par.get('context_a2a_size')}, ring between them"
            }.get(par.get("context_comm"), "ring attention")
    context = f", context {par['context']} ({comm})" if par.get("context", 1) > 1 else ""
    expert = f", expert {par['expert']}" if par.get("expert", 1) > 1 else ""
    return (f"{result.num_gpus} GPUs: data {par.get('data')}{context}, tensor {par.get('tensor')}, pipeline "
            f"{par.get('pipeline')}{expert}, schedule {par.get('schedule')}, zero {par.get('zero_stage')}"
            + "".join(f", {f}" for f in flags))


def cost_lines(cost: dict) -> list[str]:
    """The epoch and training-run costs of ``gpusim run --epoch-samples/--train-tokens`` (the result
    JSON's ``run_cost``), one line each; a file written before the counts were kept says "the samples
    asked"."""
    lines = []
    if cost.get("epoch_usd") is not None:
        samples = cost.get("epoch_samples")
        lines.append(f"epoch of {plural(int(samples), 'sample') if samples else 'the samples asked'}: "
                     f"{format_duration(cost['epoch_s'])}, {format_usd(cost['epoch_usd'])}")
    if cost.get("training_usd") is not None:
        tokens = cost.get("train_tokens")
        lines.append(f"training run of {plural(int(tokens), 'token') if tokens else 'the tokens asked'}: "
                     f"{format_duration(cost['training_s'])} on {plural(int(cost['num_devices']), 'device')}, "
                     f"{format_usd(cost['training_usd'])} ({cost['tokens_per_usd']:,.0f} tokens/USD)")
    return lines
