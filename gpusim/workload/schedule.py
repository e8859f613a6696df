"""Pipeline schedules: the order in which each stage runs its micro-batches' forwards and backwards.

The step engine (:mod:`gpusim.engine.cluster`) runs this order, and the memory model replays it to
find the activations a stage holds at its peak."""

from __future__ import annotations

from gpusim.errors import SimulationError

SCHEDULES = ("gpipe", "1f1b", "interleaved")


def pipeline_order(schedule: str, num_stages: int, num_microbatches: int, stage: int,
                   num_chunks: int = 1) -> list[tuple[str, int, int]]:
    """The order one stage runs its work: ``("F"|"B", micro-batch, chunk)`` items.

    GPipe: every forward, then every backward. 1F1B (PipeDream-Flush): ``p - s - 1`` warm-up forwards,
    then one forward and one backward alternately, then the remaining backwards. Interleaved (Megatron):
    the same with ``v`` model chunks per stage, micro-batches taken in groups of ``p``."""
    p, m, v, s = num_stages, num_microbatches, num_chunks, stage
    if schedule == "gpipe":
        fw = [("F", i, 0) for i in range(m)]
        return fw + [("B", i, 0) for i in reversed(range(m))]
    if schedule == "1f1b":
        warm = min(p - s - 1, m)
        order = [("F", i, 0) for i in range(warm)]
        f, b = warm, 0
        while b < m:
            if f < m:
                order.append(("F", f, 0))
                f += 1
            order.append(("B", b, 0))
            b += 1
        return order
    if schedule == "interleaved":
        total = m * v

        def fwd(k: int) -> tuple[str, int, int]:
            return ("F", (k // (p * v)) * p + k % p, (k // p) % v)

        def bwd(k: int) -> tuple[str, int, int]:
            return ("B", (k // (p * v)) * p + k % p, v - 1 - (k // p) % v)

        warm = min((p - s - 1) * 2 + (v - 1) * p, total)
        order = [fwd(k) for k in range(warm)]
        f, b = warm, 0
        while b < total:
            if f < total:
                order.append(fwd(f))
                f += 1
            order.append(bwd(b))
            b += 1
        return order
    raise SimulationError(f"unknown pipeline schedule {schedule!r}; expected one of {', '.join(SCHEDULES)}")
