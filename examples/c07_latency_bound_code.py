"""C7 on real code: "latency is hidden by thread parallelism", or here, is not. gpusim's own tiled GEMMs,
as Numba compiled them, measured on an H200 (measurements/h200_sxm_141gb/kernels.csv). Their plan is a
library-quality kernel of the same tiles; their compiled code (kernels_sass.csv, counted by `gpusim sass`)
copies each operand tile element by element, and each copy's store to shared memory waits for its load:
one 4- or 2-byte load in flight per thread, with 4 warps per CTA and 1-3 CTAs per SM. The example prints,
for each measured GEMM, the plan's time, the compiled code's and the measured one, then asks the model
what the same code would take with more loads in flight per thread (a copy loop that issues several
loads before it stores them): the time falls with the bytes in flight, as Little's law says, until the
warps' own instructions, 160-210 per element copied, take the whole time."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402
from gpusim.accuracy import load_code_rows, load_plan_rows, own_kernel_plan  # noqa: E402
from gpusim.engine.kernel import simulate_kernel  # noqa: E402
from gpusim.engine.machine import machine_of  # noqa: E402
from gpusim.measurements import load_kernel_cases  # noqa: E402

HW = "h200_sxm_141gb"
MEASURED = Path(__file__).resolve().parent.parent / "measurements" / HW / "kernels.csv"
LOADS_IN_FLIGHT = (1, 2, 4, 8, 16)


def with_loads_in_flight(plan, loads: int):
    """The compiled plan with ``loads`` of its element loads in flight per thread per round trip: the
    trips fall by that factor, and each carries that many trips' instructions and stalls."""
    return replace(plan, bytes_in_flight_per_cta=plan.bytes_in_flight_per_cta * loads,
                   warp_instructions_per_trip=plan.warp_instructions_per_trip * loads,
                   warp_stall_cycles_per_trip=plan.warp_stall_cycles_per_trip * loads)


def code_bound(plan, round_trips: float, machine) -> float:
    """Seconds the code takes with every load's latency hidden: on each scheduler, per round trip of
    a warp, the issue of all its warps, or one warp's issue and stalls if it has the scheduler alone;
    for every round of CTAs the busiest SM runs."""
    warps = -(-plan.threads_per_cta // machine.warp_size)
    issue, stall = plan.warp_instructions_per_trip, plan.warp_stall_cycles_per_trip
    cycles, left = 0.0, plan.grid
    while left > 0:  # one wave of CTAs after another, the last maybe partial
        count = min(left, plan.ctas_per_unit * machine.num_units)
        per_scheduler = -(-(-(-count // machine.num_units)) * warps // machine.num_schedulers_per_unit)
        cycles += round_trips * max(per_scheduler * issue, issue + stall)
        left -= count
    return cycles / machine.unit_clock_hz


def main(quick: bool = False, out_dir: Path = Path("example-output")) -> dict:
    machine = machine_of(C.load_hardware(HW))
    plans, code = load_plan_rows(MEASURED), load_code_rows(MEASURED)
    cases = [c for c in load_kernel_cases(MEASURED) if c.op == "matmul"]
    rows = []
    print(f"gpusim's own GEMMs on the {HW} (time in us): plan alone, as compiled, measured; then the compiled "
          f"code with 1, 2, 4, 8, 16 loads in flight per thread")
    for case in cases:
        ideal = own_kernel_plan(case, plans[case.case_id], machine)
        compiled = own_kernel_plan(case, plans[case.case_id], machine, code[case.case_id])
        sweep = [simulate_kernel(with_loads_in_flight(compiled, n), machine).time_s for n in LOADS_IN_FLIGHT]
        l2_latency = simulate_kernel(replace(compiled, delayed_hits=False), machine).time_s
        code_bound_s = code_bound(compiled, float(code[case.case_id]["round_trips"]), machine)
        rows.append({"case_id": case.case_id, "plan": compiled.name, "ctas_per_sm": compiled.ctas_per_unit,
                     "registers": compiled.registers_per_thread, "measured_s": case.measured_value,
                     "plan_alone_s": simulate_kernel(ideal, machine).time_s, "compiled_s": sweep[0],
                     "compiled_l2_latency_s": l2_latency, "loads_in_flight_s": dict(zip(LOADS_IN_FLIGHT, sweep)),
                     "code_bound_s": code_bound_s})
        r = rows[-1]
        print(f"  {case.case_id:<26} {r['ctas_per_sm']} CTA/SM x {r['registers']} regs: "
              f"{r['plan_alone_s'] * 1e6:8.1f} {r['compiled_s'] * 1e6:9.1f} {r['measured_s'] * 1e6:9.1f} | "
              + " ".join(f"{t * 1e6:8.1f}" for t in sweep) + f" | its code alone {code_bound_s * 1e6:8.1f}")
    _plot(out_dir / "c07_latency_bound_code.png", rows)
    errors = [r["compiled_s"] / r["measured_s"] - 1 for r in rows]
    slowdown = [r["measured_s"] / r["plan_alone_s"] for r in rows]
    gain = [r["compiled_s"] / r["loads_in_flight_s"][LOADS_IN_FLIGHT[-1]] for r in rows]
    # with many loads in flight, what is left is the code: within a third above its bound
    near_bound = [r["loads_in_flight_s"][LOADS_IN_FLIGHT[-1]] / r["code_bound_s"] for r in rows]
    ok = max(abs(e) for e in errors) < 0.2 and min(slowdown) > 5
    text = (f"the measured GEMMs take {min(slowdown):.0f}-{max(slowdown):.0f}x their plan's time; timed as their "
            f"code runs (one load in flight per thread, each round trip waiting the DRAM latency as the CTAs sharing "
            f"a tile ask for its lines together) they come within {min(errors):+.0%}..{max(errors):+.0%}; "
            f"{LOADS_IN_FLIGHT[-1]} loads in flight per thread would make the same code "
            f"{min(gain):.1f}-{max(gain):.1f}x faster, no more: its instructions then take the time")
    return {"rows": rows, "compiled_error_fractions": errors, "plan_slowdowns": slowdown,
            "gain_at_most_loads": gain, "most_loads_over_code_bound": near_bound, "verdict": C.verdict("confirmed" if ok else "qualified", text)}


def _plot(path: Path, rows: list[dict]) -> Path:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.5, 4.5), layout="constrained")
    ax = fig.add_subplot()
    for r in rows:
        times = [r["loads_in_flight_s"][n] * 1e6 for n in LOADS_IN_FLIGHT]
        line, = ax.plot(LOADS_IN_FLIGHT, times, marker="o", label=r["case_id"])
        ax.plot([1], [r["measured_s"] * 1e6], marker="x", markersize=10, color=line.get_color())
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("element loads in flight per thread (1 = the compiled code; x = measured)")
    ax.set_ylabel("kernel time (us)")
    ax.set_title("gpusim's own Numba GEMMs on an H200: latency-bound until their instructions bind")
    ax.legend(fontsize=7)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


if __name__ == "__main__":
    C.cli(main)
