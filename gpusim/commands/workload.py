"""``gpusim workload list | show``: inspect workload descriptions."""

from __future__ import annotations

import argparse
import json

from gpusim.config.loader import read_yaml
from gpusim.units import format_binary_bytes, format_quantity, plural


def register(sub: argparse._SubParsersAction) -> None:
    wl = sub.add_parser("workload", help="list and show workloads (ops and models)",
                        description="Inspect workload descriptions.", epilog="Example: gpusim workload show gpt3_175b_train")
    wl_sub = wl.add_subparsers(dest="workload_command", metavar="WORKLOAD_COMMAND")
    wl_sub.required = True

    p = wl_sub.add_parser("list", help="every built-in workload with a one-line description",
                          epilog="Example: gpusim workload list")
    p.set_defaults(func=cmd_list)

    p = wl_sub.add_parser("show", help="op summary, FLOP, bytes, parameters and memory footprint",
                          epilog="Example: gpusim workload show llama2_7b_train --set batch_size=2 --hw h100_sxm5_80gb")
    p.add_argument("workload", metavar="NAME_OR_PATH")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE",
                   help="override a workload value (e.g. --set batch_size=16 --set config.num_layers=2)")
    p.add_argument("--hw", metavar="HARDWARE", help="compare the memory footprint with this GPU's memory")
    p.add_argument("--json", action="store_true", help="print one JSON object (SI units)")
    p.set_defaults(func=cmd_show)


def cmd_list(args: argparse.Namespace) -> int:
    from gpusim.workload import list_workloads

    rows = []
    for name, path in list_workloads():
        data = read_yaml(path)
        what = str(data.get("model", "ops")) + (f" {data['mode']}" if "mode" in data else "")
        rows.append((name, what, str(data.get("description", ""))))
    width = max(len(r[0]) for r in rows)
    kind_width = max(len(r[1]) for r in rows)
    for name, what, description in rows:
        print(f"{name:<{width}}  {what:<{kind_width}}  {description}")
    return 0


def _capacity(hardware: str) -> tuple[str, float]:
    from gpusim.config import load_hardware, summary

    desc = load_hardware(hardware)
    info = summary(desc)
    capacity = info.get("dram_capacity_bytes")
    if capacity is None:
        from gpusim.errors import ConfigError
        raise ConfigError(hardware, "", "has no single-GPU memory capacity to compare with")
    return desc.name, float(capacity)


def cmd_show(args: argparse.Namespace) -> int:
    from gpusim.workload import fits, load_workload

    w = load_workload(args.workload, args.overrides)
    info = w.summary()
    if args.hw:
        hw_name, capacity = _capacity(args.hw)
        ok, shortfall = fits(w.memory, capacity)
        info["fits"] = {"hardware": hw_name, "capacity_bytes": capacity, "fits": ok, "shortfall_bytes": shortfall}
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    header = f"{w.name} ({w.source})"
    print(header + (f": {w.description}" if w.description else ""))
    if w.kind == "model":
        print(f"  {w.mode}, {w.precision}, {plural(info['num_parameters'], 'parameter')}, "
              f"{plural(w.samples_per_step, 'sample')}"
              + (f", {plural(w.tokens_per_step, 'token')}" if w.tokens_per_step else "") + " per step")
    print(f"  FLOP per step {format_quantity(info['flop_per_step'], 'flop')} "
          f"(model {format_quantity(info['model_flop_per_step'], 'flop')}, "
          f"executed {format_quantity(info['executed_flop_per_step'], 'flop')}); "
          f"HBM traffic {format_binary_bytes(info['bytes_read_per_step'])} read, {format_binary_bytes(info['bytes_written_per_step'])} written")
    print(f"  {plural(info['num_kernels'], 'op launch', 'op launches')} from {plural(info['num_nodes'], 'node')}, "
          f"{plural(info['num_distinct_ops'], 'distinct op')} (on a device an op runs as one kernel or more: "
          "`gpusim run` counts kernel launches)")
    if w.fusion.mode != "none":
        print(f"  fusion {w.fusion.mode}: {plural(w.fusion.num_kernels_removed, 'op launch', 'op launches')} and "
              f"{format_binary_bytes(w.fusion.bytes_saved)} of HBM traffic fewer than fusion none")
    rows = [("op kind", "launches", "FLOP", "bytes read", "bytes written")]
    for kind, row in sorted(info["by_kind"].items(), key=lambda kv: -kv[1]["flop"]):
        rows.append((kind, f"{int(row['num_kernels']):,}", format_quantity(row["flop"], "flop"),
                     format_binary_bytes(row["bytes_read"]), format_binary_bytes(row["bytes_written"])))
    if len(info["by_phase"]) > 1:
        rows.append(("", "", "", "", ""))
        rows.append(("phase", "launches", "FLOP", "bytes read", "bytes written"))
        for phase, row in info["by_phase"].items():
            rows.append((phase, f"{int(row['num_kernels']):,}", format_quantity(row["flop"], "flop"),
                         format_binary_bytes(row["bytes_read"]), format_binary_bytes(row["bytes_written"])))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    print()
    for r in rows:
        print("  " + "  ".join(c.ljust(widths[i]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(r)))
    m = info["memory"]
    print()
    stage = f" (pipeline stage {m['pipeline_stage']}, the fullest)" if m.get("pipeline_stage") is not None else ""
    print(f"  memory per GPU{stage}: " + ", ".join(f"{label} {format_binary_bytes(m[key])}" for key, label in (
        ("weights_bytes", "weights"), ("gradients_bytes", "gradients"), ("optimizer_bytes", "optimizer"),
        ("activations_bytes", "activations"), ("kv_cache_bytes", "KV cache"), ("workspace_bytes", "workspace"))
        if m[key]) + f"; total {format_binary_bytes(m['total_bytes'])}")
    if info.get("memory_by_stage"):
        columns = (("weights_bytes", "weights"), ("gradients_bytes", "gradients"), ("optimizer_bytes", "optimizer"),
                   ("activations_bytes", "activations"), ("kv_cache_bytes", "KV cache"),
                   ("workspace_bytes", "workspace"), ("total_bytes", "total"))
        shown = [(key, label) for key, label in columns if any(st[key] for st in info["memory_by_stage"])]
        rows = [("stage",) + tuple(label for _, label in shown)]
        rows += [(str(st["pipeline_stage"]),) + tuple(format_binary_bytes(st[key]) for key, _ in shown)
                 for st in info["memory_by_stage"]]
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        print("  per pipeline stage:")
        for r in rows:
            print("    " + "  ".join(c.ljust(widths[i]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(r)))
    if "fits" in info:
        f = info["fits"]
        verdict = "fits" if f["fits"] else f"does not fit: {format_binary_bytes(f['shortfall_bytes'])} short"
        print(f"  on {f['hardware']} ({format_binary_bytes(f['capacity_bytes'])}): {verdict}")
    for note in info["warnings"]:
        print(f"  warning: {note}")
    return 0
