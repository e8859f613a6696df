"""``gpusim measure --suite block``: time one transformer block's training step in PyTorch and set it
beside gpusim's simulation of the same block, kernel class by kernel class.

gpusim's whole training steps run short of the published ones (README, "Whole training steps of
PyTorch stacks") while its GEMM and attention kernels alone do not. This suite is the measurement that
says where the difference lives: a Llama-style block (RMSNorm, Q/K/V/O projections with grouped-query
heads, rotary embedding, causal ``scaled_dot_product_attention``, SwiGLU MLP, residual adds) in eager
PyTorch, BF16, for a few shapes. Each probe is timed with CUDA events around the forward alone and
around forward plus backward (median of repeats after warm-ups), and one more step is profiled with
``torch.profiler`` for every kernel's name and device time. Kernels are sorted into ``gemm``,
``attention`` and ``other`` by name; gpusim simulates the same block (the ``llama`` builder with one
layer, ``fusion: attention_only``, the attention kernel the profile shows) on the GPU's description,
and each row of ``block.csv`` gives one phase and class, measured and simulated. The forward's four
projections are also timed alone, each in a loop of its own (class ``gemm_isolated``): whether a GEMM
runs slower inside a step than in a benchmark is the first thing to know.

Only :func:`run_block_probes` needs PyTorch and a GPU (or, for tests, a CPU: it takes the device).
"""

from __future__ import annotations

import csv
import re
import statistics
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable

from gpusim.errors import GpusimError

BLOCK_CLASSES = ("gemm", "attention", "other")
ATTENTION_MARKERS = ("flash", "fmha", "attention", "attn", "sdpa", "cudnn")
GEMM_MARKERS = ("gemm", "nvjet", "cutlass", "xmma", "cublas", "wgmma", "16816", "_mma_", "sm90_", "sm80_", "ampere_")
BLOCK_COLUMNS = ("case_id", "gpu", "phase", "kernel_class", "measured_s", "simulated_s", "error_fraction",
                 "num_kernels", "source", "notes")


@dataclass(frozen=True)
class BlockProbe:
    """One Llama-style block: ``batch`` sequences of ``seq_len`` tokens, BF16, or with ``precision``
    ``fp8`` its four projections in FP8 (:func:`_fp8_linear`; attention and the rest stay BF16)."""

    hidden_size: int
    num_heads: int
    num_kv_heads: int
    ffn_hidden_size: int
    seq_len: int
    batch: int
    precision: str = "bf16"

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    def case_id(self, gpu: str) -> str:
        return (f"{gpu}_torch_llama_block_h{self.hidden_size}_kv{self.num_kv_heads}_f{self.ffn_hidden_size}"
                f"_s{self.seq_len}_b{self.batch}" + ("" if self.precision == "bf16" else f"_{self.precision}"))

    def workload_items(self, attention_kernel: str) -> list[str]:
        """Overrides of the built-in ``llama2_7b_train`` workload that describe this block."""
        return ["config.num_layers=1", f"config.hidden_size={self.hidden_size}", f"config.num_heads={self.num_heads}",
                f"config.num_kv_heads={self.num_kv_heads}", f"config.ffn_hidden_size={self.ffn_hidden_size}",
                f"config.seq_len={self.seq_len}", f"batch_size={self.batch}", f"precision={self.precision}",
                "activation_checkpointing=none", "fusion=attention_only",
                f"config.attention_kernel={attention_kernel}"]


BLOCK_PROBES: tuple[BlockProbe, ...] = (
    BlockProbe(4096, 32, 8, 14336, 4096, 1),   # Llama 3 8B, NeMo's H100 runs' sequence share under CP 2
    BlockProbe(4096, 32, 8, 14336, 8192, 1),   # Llama 3 8B at its training length
    BlockProbe(4096, 32, 32, 11008, 4096, 2),  # Llama 2 7B, torchtitan's and llm-foundry's sizes
    BlockProbe(2048, 16, 16, 5632, 2048, 8),   # a 1B-class block, many tokens per GEMM row
    BlockProbe(4096, 32, 8, 14336, 4096, 1, "fp8"),   # the FP8 runs gpusim simulates shortest
    BlockProbe(2048, 16, 16, 5632, 2048, 8, "fp8"),   # smaller GEMMs, where FP8's casts weigh most
)
"""The blocks the suite runs: the models of the training runs gpusim simulates short."""


@dataclass(frozen=True)
class BlockResult:
    probe: BlockProbe
    forward_times_s: tuple[float, ...]
    step_times_s: tuple[float, ...]
    """Forward plus backward of each timed repeat."""
    kernels: tuple[tuple[str, float, str], ...]
    """(name, device seconds, phase) of every kernel of one profiled step, phase ``forward`` or ``backward``."""
    isolated_gemm_s: float | None = None
    """The forward's four projections (QKV, output, gate-up, down) each timed alone in a loop of its own
    (median of repeats), summed: set beside the same GEMMs inside the block, it says whether they run
    slower in a step than in a benchmark."""

    @property
    def forward_s(self) -> float:
        return statistics.median(self.forward_times_s)

    @property
    def step_s(self) -> float:
        return statistics.median(self.step_times_s)


def kernel_class(name: str) -> str:
    """``attention``, ``gemm`` or ``other`` for a CUDA kernel's name (attention first: FlashAttention's
    kernels use MMA instructions too)."""
    low = name.lower()
    if any(marker in low for marker in ATTENTION_MARKERS):
        return "attention"
    if any(marker in low for marker in GEMM_MARKERS):
        return "gemm"
    return "other"


def gpusim_attention_kernel(kernels) -> str:
    """The gpusim attention kernel that stands for the one the profile ran: cuDNN's and the Hopper
    FlashAttention-3 kernels are warp-specialized and asynchronous (``fused_async``), FlashAttention-2's
    are not (``fused``)."""
    names = [name.lower() for name, _, _ in kernels if kernel_class(name) == "attention"]
    if any("cudnn" in n or "sm90" in n or "fmha" in n or "fa3" in n for n in names):
        return "fused_async"
    return "fused"


def simulated_kernels(probe: BlockProbe, hardware_name: str, attention_kernel: str
                      ) -> list[tuple[str, str, str, float, int]]:
    """(phase, class, node, seconds, launches) of every kernel of the block's forward and backward as
    gpusim simulates them on ``hardware_name`` (one GPU, eager launches), in launch order; the seconds
    hold each launch's gap."""
    from gpusim.config import load_hardware
    from gpusim.engine.simulate import simulate
    from gpusim.workload import load_workload

    result = simulate(load_hardware(hardware_name), load_workload("llama2_7b_train",
                                                                  probe.workload_items(attention_kernel)))
    return [(k.phase, "gemm" if k.op == "matmul" else "attention" if k.op == "attention" else "other",
             k.node.removeprefix("layer0."), (k.time_s + k.launch_gap_s) * k.repeat, k.repeat)
            for k in result.kernels if k.node.startswith("layer0.") and k.phase in ("forward", "backward")]


def simulated_block(probe: BlockProbe, hardware_name: str, attention_kernel: str
                    ) -> dict[tuple[str, str], tuple[float, int]]:
    """{(phase, class): (seconds, kernels)} of the block's forward and backward as gpusim simulates them on
    ``hardware_name`` (one GPU, eager launches)."""
    out: dict[tuple[str, str], tuple[float, int]] = {}
    for phase, cls, _, seconds, launches in simulated_kernels(probe, hardware_name, attention_kernel):
        total, count = out.get((phase, cls), (0.0, 0))
        out[(phase, cls)] = (total + seconds, count + launches)
    return out


def block_rows(results: list[BlockResult], gpu: str, hardware_name: str, provenance: dict[str, Any]
               ) -> list[dict[str, Any]]:
    """Rows of ``block.csv``: per probe, the CUDA-event times of the forward and of the whole step
    (class ``all``) and, per phase and kernel class, the profiled kernels' device time, each beside
    gpusim's."""
    source = (f"gpusim {provenance.get('gpusim_version', '')} measure --suite block (torch "
              f"{provenance.get('torch_version', '?')}, CUDA {provenance.get('torch_cuda_version', '?')}) on "
              f"{provenance.get('gpu_name', '?')}, {provenance.get('date', '')}")
    rows: list[dict[str, Any]] = []
    for result in results:
        probe = result.probe
        attention = gpusim_attention_kernel(result.kernels)
        simulated = simulated_block(probe, hardware_name, attention)
        case = probe.case_id(gpu)

        def row(phase: str, cls: str, measured: float, sim: float, count: int, notes: str) -> dict[str, Any]:
            return {"case_id": case, "gpu": gpu, "phase": phase, "kernel_class": cls, "measured_s": measured,
                    "simulated_s": sim, "error_fraction": (sim - measured) / measured if measured > 0 else "",
                    "num_kernels": count, "source": source, "notes": notes}

        timed = f"median of {len(result.step_times_s)} CUDA-event-timed repeats; gpusim attention kernel {attention}"
        rows.append(row("forward", "all", result.forward_s, simulated_seconds(simulated, "forward", "all"), 0, timed))
        rows.append(row("step", "all", result.step_s, simulated_seconds(simulated, "step", "all"), 0, timed))
        for phase in ("forward", "backward"):
            for cls in BLOCK_CLASSES:
                names = [(n, s) for n, s, p in result.kernels if p == phase and kernel_class(n) == cls]
                sim_s, sim_count = simulated.get((phase, cls), (0.0, 0))
                slowest = sorted(names, key=lambda x: -x[1])[:3]
                notes = (f"profiled kernels' device time; gpusim {sim_count} kernel launches; longest: "
                         + "; ".join(f"{n[:80]} ({s * 1e6:.3g} us)" for n, s in slowest))
                rows.append(row(phase, cls, sum(s for _, s in names), sim_s, len(names), notes))
        if result.isolated_gemm_s is not None:
            sim_gemm = simulated.get(("forward", "gemm"), (0.0, 0))[0]
            rows.append(row("forward", "gemm_isolated", result.isolated_gemm_s, sim_gemm, 4,
                            "the forward's four projections, each timed alone (median of repeats)"))
    return rows


def simulated_seconds(simulated: dict[tuple[str, str], tuple[float, int]], phase: str, cls: str) -> float:
    """gpusim's seconds for one ``block.csv`` row from :func:`simulated_block`'s result: a kernel
    class's own, or for class ``all`` the whole forward (phase ``forward``) or step (phase ``step``)."""
    if cls != "all":
        return simulated.get((phase, cls), (0.0, 0))[0]
    return sum(seconds for (p, _), (seconds, _) in simulated.items() if phase == "step" or p == phase)


def _probe(case_id: str, gpu: str) -> BlockProbe | None:
    """The suite's probe a ``block.csv`` case id names on ``gpu`` (None for blocks it no longer runs)."""
    return next((p for p in BLOCK_PROBES if p.case_id(gpu) == case_id), None)


def _attention_kernel_named(row: dict[str, str]) -> str:
    """The gpusim attention kernel a ``block.csv`` row's notes name (``fused_async`` where they name none)."""
    named = re.search(r"gpusim attention kernel (\w+)", row.get("notes") or "")
    return named.group(1) if named else "fused_async"


def resimulated_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a ``block.csv`` beside gpusim's simulation of each block run again with the model
    as it is now (the file's ``simulated_s`` is the model's when the block was measured): case_id,
    gpu, phase, kernel_class, measured_s, simulated_s, error_fraction. The attention kernel is the one
    the file's notes name; rows of blocks the suite no longer runs, and ``gemm_isolated``, are left
    out. A row without a number gives a one-line error naming the file, the case and the column."""
    with path.open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    out: list[dict[str, Any]] = []
    for key in dict.fromkeys((r.get("case_id", ""), r.get("gpu", "")) for r in rows):
        probe = _probe(*key)
        group = [r for r in rows if (r["case_id"], r["gpu"]) == key and r.get("kernel_class") != "gemm_isolated"]
        if probe is None or not group:
            continue
        simulated = simulated_block(probe, key[1], _attention_kernel_named(group[0]))
        for r in group:
            try:
                measured = float(r["measured_s"])
            except (TypeError, ValueError):
                raise GpusimError(f"{path}: {key[0]}: measured_s: not a number ({r['measured_s']!r})") from None
            sim = simulated_seconds(simulated, r["phase"], r["kernel_class"])
            out.append({"case_id": key[0], "gpu": key[1], "phase": r["phase"], "kernel_class": r["kernel_class"],
                        "measured_s": measured, "simulated_s": sim,
                        "error_fraction": (sim - measured) / measured if measured > 0 else None})
    return out


def short_kernel_name(name: str) -> str:
    """A profiled kernel's name cut to what tells kernels apart: the kernel, its numeric template
    arguments (the launch shape), the functor or op it runs and the first scalar type named, e.g.
    ``elementwise_kernel<128, 4> neg_kernel_cuda BFloat16``."""
    name = re.sub(r"^void |at::native::|\(anonymous namespace\)::|c10::|std::|binary_internal::", "", name).strip()
    kernel = re.split(r"[<(]", name, maxsplit=1)[0].strip()
    rest = name[len(kernel):]
    numbers = re.match(r"<((?:\s*\d+u?\s*,)*\s*\d+u?)\s*[,>]", rest)
    shape = f"<{numbers.group(1).strip()}>" if numbers else ""
    functor = next((m for pattern in (r"\b(\w+_kernel_cuda)", r"\b(\w*Functor_\w+)",
                                      r"\b((?!Binary|AUnary|BUnary)\w+Functor)\b", r"\b(\w*Functor\w*)",
                                      r"\b(\w+Ops|\w+_functor)",
                                      r"\b((?!gpu_kernel_impl)\w+_kernel_impl)",
                                      r"\b((?!gpu_kernel|elementwise_kernel|vectorized_elementwise_kernel)\w+_kernel)\b",
                                      r"\b(launch_\w+)")
                    if (m := re.search(pattern, rest))), None)
    scalar = re.search(r"\b(BFloat16|Half|float|double|Float8_\w+)\b", rest)
    return " ".join(x for x in (kernel + shape, functor.group(1) if functor else "", scalar.group(1) if scalar else "")
                    if x)


def block_kernel_listing(path: Path, case: str) -> list[tuple[str, list[tuple[str, float]], list[tuple[str, float]]]]:
    """For the block ``case`` (its case id, with or without the GPU prefix) of a ``block.csv``: per phase,
    the measured kernels of class ``other`` from the ``block_kernels.csv`` beside it, (short name,
    seconds) in launch order, and gpusim's, (node, seconds), simulated with the model as it is now:
    where a class total of the block table parts ways, kernel by kernel."""
    kernels_path = path.with_name("block_kernels.csv")
    with path.open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    matches = sorted({(r["case_id"], r["gpu"]) for r in rows if r["case_id"] in (case, f"{r['gpu']}_{case}")})
    if not matches:
        raise GpusimError(f"{path}: no block {case!r} (case ids: "
                          f"{', '.join(sorted({r['case_id'] for r in rows}))})")
    case_id, gpu = matches[0]
    probe = _probe(case_id, gpu)
    if probe is None:
        raise GpusimError(f"{path}: {case_id}: not one of the blocks the suite runs")
    if not kernels_path.is_file():
        raise GpusimError(f"{kernels_path}: missing (the block suite writes it beside {path.name})")
    simulated = simulated_kernels(probe, gpu, _attention_kernel_named(next(r for r in rows if r["case_id"] == case_id)))
    with kernels_path.open(newline="", encoding="utf-8") as fh:
        profiled = [r for r in csv.DictReader(fh) if r["case_id"] == case_id]

    def seconds(r: dict[str, str]) -> float:
        try:
            return float(r["device_s"])
        except (TypeError, ValueError):
            raise GpusimError(f"{kernels_path}: {case_id}: device_s: not a number ({r['device_s']!r})") from None

    out = []
    for phase in ("forward", "backward"):
        measured = [(short_kernel_name(r["kernel"]), seconds(r)) for r in profiled
                    if r["phase"] == phase and r["kernel_class"] == "other"]
        sim = [(node, seconds) for p, cls, node, seconds, _ in simulated if p == phase and cls == "other"]
        out.append((phase, measured, sim))
    return out


KERNEL_COLUMNS = ("case_id", "gpu", "phase", "kernel_class", "kernel", "device_s")


def kernel_rows(results: list[BlockResult], gpu: str) -> list[dict[str, Any]]:
    """Rows of ``block_kernels.csv``: every kernel of each probe's profiled step in launch order, so a
    class total in ``block.csv`` can be taken apart kernel by kernel."""
    return [{"case_id": result.probe.case_id(gpu), "gpu": gpu, "phase": phase, "kernel_class": kernel_class(name),
             "kernel": name, "device_s": seconds}
            for result in results for name, seconds, phase in result.kernels]


def _block_module(torch, probe: BlockProbe, device: str):
    """The block in eager PyTorch (written for this suite): pre-norm RMSNorm, bias-free projections,
    rotary embedding on queries and keys, causal SDPA over grouped-query heads, SwiGLU MLP."""
    nn, F = torch.nn, torch.nn.functional
    dtype = torch.bfloat16
    h, heads, kv, hd, ffn = probe.hidden_size, probe.num_heads, probe.num_kv_heads, probe.head_dim, probe.ffn_hidden_size

    class RMSNorm(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.ones(h, device=device, dtype=dtype))

        def forward(self, x):
            x32 = x.float()
            return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-5)).to(x.dtype) * self.weight

    def rotate(x, cos, sin):
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * cos + rotated * sin

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm1, self.norm2 = RMSNorm(), RMSNorm()
            linear = nn.Linear if probe.precision == "bf16" else _fp8_linear(torch)
            self.qkv = linear(h, (heads + 2 * kv) * hd, bias=False, device=device, dtype=dtype)
            self.proj = linear(heads * hd, h, bias=False, device=device, dtype=dtype)
            self.up = linear(h, 2 * ffn, bias=False, device=device, dtype=dtype)
            self.down = linear(ffn, h, bias=False, device=device, dtype=dtype)
            positions = torch.arange(probe.seq_len, device=device, dtype=torch.float32)
            freqs = 1.0 / (10000.0 ** (torch.arange(0, hd, 2, device=device, dtype=torch.float32) / hd))
            angles = torch.outer(positions, freqs).repeat(1, 2)
            self.register_buffer("cos", angles.cos().to(dtype)[None, None])
            self.register_buffer("sin", angles.sin().to(dtype)[None, None])

        def forward(self, x):
            b, s, _ = x.shape
            q, k, v = self.qkv(self.norm1(x)).split([heads * hd, kv * hd, kv * hd], dim=-1)
            q = rotate(q.view(b, s, heads, hd).transpose(1, 2), self.cos, self.sin)
            k = rotate(k.view(b, s, kv, hd).transpose(1, 2), self.cos, self.sin)
            v = v.view(b, s, kv, hd).transpose(1, 2)
            if kv != heads:
                k = k.repeat_interleave(heads // kv, dim=1)
                v = v.repeat_interleave(heads // kv, dim=1)
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(o.transpose(1, 2).reshape(b, s, heads * hd))
            gate, up = self.up(self.norm2(x)).chunk(2, dim=-1)
            return x + self.down(F.silu(gate) * up)

    block = Block()
    x = torch.randn(probe.batch, probe.seq_len, h, device=device, dtype=dtype, requires_grad=True)
    return block, x


E4M3_MAX = 448.0
E5M2_MAX = 57344.0
"""Largest finite values of the two FP8 formats (OCP FP8 specification): E4M3 carries activations and
weights, E5M2 gradients, as Transformer Engine's hybrid format does."""


def _fp8_linear(torch):
    """An ``nn.Linear`` whose three GEMMs run in FP8 with per-tensor dynamic scaling (written for this
    suite, in the manner of Transformer Engine's current scaling): the forward casts input and weight
    to E4M3 (amax, scale, cast) and multiplies them with ``torch._scaled_mm`` into BF16; the backward
    casts the output gradient to E5M2 and runs the input-gradient and weight-gradient GEMMs in FP8 on
    transposed copies (cuBLASLt takes A row-major and B column-major only)."""
    nn = torch.nn
    e4m3, e5m2 = torch.float8_e4m3fn, torch.float8_e5m2

    def cast(t, fmt, largest):
        scale = largest / t.abs().amax().float().clamp(min=1e-12)
        return (t.float() * scale).to(fmt), scale.reciprocal()

    class FP8Matmul(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight):
            x2 = x.reshape(-1, x.shape[-1])
            x8, sx = cast(x2, e4m3, E4M3_MAX)
            w8, sw = cast(weight, e4m3, E4M3_MAX)
            ctx.save_for_backward(x8, sx, w8, sw)
            ctx.shape = x.shape
            out = torch._scaled_mm(x8, w8.t(), scale_a=sx, scale_b=sw, out_dtype=x.dtype)
            return out.reshape(*x.shape[:-1], weight.shape[0])

        @staticmethod
        def backward(ctx, grad):
            x8, sx, w8, sw = ctx.saved_tensors
            g8, sg = cast(grad.reshape(-1, grad.shape[-1]), e5m2, E5M2_MAX)
            dx = torch._scaled_mm(g8, w8.t().contiguous().t(), scale_a=sg, scale_b=sw, out_dtype=grad.dtype)
            dw = torch._scaled_mm(g8.t().contiguous(), x8.t().contiguous().t(), scale_a=sg, scale_b=sx,
                                  out_dtype=grad.dtype)
            return dx.reshape(ctx.shape), dw

    class FP8Linear(nn.Linear):
        def forward(self, x):
            return FP8Matmul.apply(x, self.weight)

    return FP8Linear


def run_block_probes(probes, num_warmups: int, num_repeats: int, device: str = "cuda",
                     progress: Callable[[BlockProbe, BlockResult], None] | None = None) -> list[BlockResult]:
    """Run every probe with PyTorch on ``device`` (see the module docstring). On a CPU the times are
    wall-clock and no kernels are profiled (for tests). A probe that runs out of GPU memory is left
    out, said on standard error, and the others still run."""
    import sys

    import torch

    results = []
    for probe in probes:
        try:
            result = _run_probe(torch, probe, num_warmups, num_repeats, device)
        except torch.cuda.OutOfMemoryError:
            print(f"gpusim: measure --suite block: {probe.case_id('gpu')} left out: out of GPU memory", file=sys.stderr)
            result = None
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
        if result is None:
            continue
        results.append(result)
        if progress is not None:
            progress(probe, result)
    return results


def _run_probe(torch, probe: BlockProbe, num_warmups: int, num_repeats: int, device: str) -> BlockResult:
    import sys
    import time

    from torch.profiler import ProfilerActivity, profile

    cuda = device.startswith("cuda")
    block, x = _block_module(torch, probe, device)
    grad = torch.randn_like(x)

    def forward():
        with torch.no_grad():
            block(x)

    def step():
        block(x).backward(grad)

    def timed(fn) -> float:
        if not cuda:
            start = time.perf_counter()
            fn()
            return time.perf_counter() - start
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        fn()
        end.record()
        end.synchronize()
        return begin.elapsed_time(end) * 1e-3

    for _ in range(num_warmups):
        step()
    forward_times = tuple(timed(forward) for _ in range(num_repeats))
    step_times = tuple(timed(step) for _ in range(num_repeats))
    kernels: list[tuple[str, float, str]] = []
    if cuda:
        try:
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                out = block(x)
                torch.cuda.synchronize()
            kernels += _profiled(prof, "forward")
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                out.backward(grad)
                torch.cuda.synchronize()
            kernels += _profiled(prof, "backward")
        except RuntimeError as exc:  # a sandbox without the profiler's activity API: times only
            print(f"gpusim: measure --suite block: no kernel profile ({str(exc).splitlines()[0][:120]})",
                  file=sys.stderr)
            kernels = []
        isolated = 0.0
        with torch.no_grad():
            for linear in (block.qkv, block.proj, block.up, block.down):
                call = partial(linear, torch.randn(probe.batch * probe.seq_len, linear.in_features, device=device,
                                                   dtype=linear.weight.dtype))
                for _ in range(num_warmups):
                    call()
                isolated += statistics.median(timed(call) for _ in range(num_repeats))
    return BlockResult(probe, forward_times, step_times, tuple(kernels), isolated if cuda else None)


def summary_lines(rows: list[dict[str, Any]]) -> list[str]:
    """One line per probe and phase: measured and simulated milliseconds of each kernel class."""
    lines = []
    for row in rows:
        if row["kernel_class"] == "all":
            lines.append(f"{row['case_id']} {row['phase']}: measured {row['measured_s'] * 1e3:.3f} ms, "
                         f"gpusim {row['simulated_s'] * 1e3:.3f} ms")
        else:
            lines.append(f"    {row['phase']:<8} {row['kernel_class']:<9} measured {row['measured_s'] * 1e3:8.3f} ms "
                         f"({row['num_kernels']} kernels), gpusim {row['simulated_s'] * 1e3:8.3f} ms")
    return lines


def _profiled(prof, phase: str) -> list[tuple[str, float, str]]:
    from gpusim.cuda_backend.library import profiler_event_seconds

    return [(e.name, profiler_event_seconds(e), phase) for e in prof.events()
            if str(getattr(e, "device_type", "")).endswith("CUDA")]
