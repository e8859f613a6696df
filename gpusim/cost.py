"""Cost of simulated runs: a price per device-second (``gpu.price_usd_per_s`` / ``cpu.price_usd_per_s``
in the description, or given on the command line as ``2.5 USD/h``) times devices times time.

Pure functions. A model workload's result describes one step; an epoch or a whole training run is a
number of samples or tokens, and its cost is the time to process them at the simulated rate.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpusim.errors import SimulationError


def price_of(hardware, price_usd_per_s: float | None = None) -> float | None:
    """Price of one device-second: ``price_usd_per_s`` if given, else the description's, else None."""
    if price_usd_per_s is not None:
        return float(price_usd_per_s)
    device = hardware.cpu if hardware.kind == "cpu" else hardware.gpu
    return getattr(device, "price_usd_per_s", None)


class CostError(SimulationError):
    """A cost this result cannot give; ``argument`` names the :func:`run_cost` argument that asked for it."""

    def __init__(self, argument: str, message: str) -> None:
        super().__init__(message)
        self.argument = argument


@dataclass(frozen=True)
class RunCost:
    price_usd_per_s: float
    num_devices: int
    step_usd: float
    """Cost of one simulated step (or of the op list) on all devices."""
    epoch_samples: float | None = None
    epoch_usd: float | None = None
    epoch_s: float | None = None
    train_tokens: float | None = None
    training_usd: float | None = None
    training_s: float | None = None
    tokens_per_usd: float | None = None
    samples_per_usd: float | None = None


def run_cost(result, price_usd_per_s: float, *, epoch_samples: float | None = None,
             train_tokens: float | None = None) -> RunCost:
    """Cost per step, per epoch of ``epoch_samples`` samples and per training run of ``train_tokens``
    tokens, for ``result`` (a SimulationResult) at ``price_usd_per_s`` per device."""
    devices = max(1, int(getattr(result, "num_gpus", 1) or 1))
    rate_usd_per_s = price_usd_per_s * devices
    step_s = result.step_time_s if result.step_time_s is not None else result.total_time_s
    out = {"price_usd_per_s": price_usd_per_s, "num_devices": devices, "step_usd": rate_usd_per_s * step_s}
    if result.samples_per_s:
        out["samples_per_usd"] = result.samples_per_s / rate_usd_per_s if rate_usd_per_s > 0 else None
    if result.tokens_per_s:
        out["tokens_per_usd"] = result.tokens_per_s / rate_usd_per_s if rate_usd_per_s > 0 else None
    if epoch_samples is not None:
        if not result.samples_per_s:
            raise CostError("epoch_samples", "an epoch cost needs a model workload (samples per second)")
        out["epoch_samples"] = epoch_samples
        out["epoch_s"] = epoch_samples / result.samples_per_s
        out["epoch_usd"] = out["epoch_s"] * rate_usd_per_s
    if train_tokens is not None:
        if not result.tokens_per_s:
            raise CostError("train_tokens", "a training-run cost needs a language-model workload (tokens per second)")
        if not any(k.phase in ("backward", "optimizer") for k in result.kernels):
            raise CostError("train_tokens", "a training-run cost needs a training workload (mode: train); this one "
                                            "has no backward pass or optimizer step")
        out["train_tokens"] = train_tokens
        out["training_s"] = train_tokens / result.tokens_per_s
        out["training_usd"] = out["training_s"] * rate_usd_per_s
    return RunCost(**out)
