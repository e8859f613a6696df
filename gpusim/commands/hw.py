"""``gpusim hw list | show | compare``: inspect hardware descriptions."""

from __future__ import annotations

import argparse
import json
from typing import Any

from gpusim.config import list_hardware, load_hardware, summary
from gpusim.config.hardware import LAUNCH_MODES
from gpusim.config.library import display_path, read_description
from gpusim.config.loader import SET_SOURCE
from gpusim.units import format_quantity


def add_set_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE",
                        help="override a hardware value, with units (e.g. --set gpu.dram.bandwidth_bytes_per_s=4.8TB/s)")


def add_launch_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--launch", choices=LAUNCH_MODES, default="eager",
                        help="how the host issues kernels: eager (PyTorch eager ops, launch.kernel_launch_s each), "
                             "native (a compiled runtime such as TensorRT-LLM, launch.native_kernel_launch_s) or "
                             "graph (CUDA-graph replay, launch.graph_kernel_launch_s); default eager")


def register(sub: argparse._SubParsersAction) -> None:
    hw = sub.add_parser("hw", help="list, show and compare hardware descriptions",
                        description="Inspect hardware descriptions.", epilog="Example: gpusim hw compare a100_sxm4_80gb h100_sxm5_80gb")
    hw_sub = hw.add_subparsers(dest="hw_command", metavar="HW_COMMAND")
    hw_sub.required = True

    p = hw_sub.add_parser("list", help="every built-in description with a one-line summary",
                          epilog="Example: gpusim hw list")
    p.set_defaults(func=cmd_list)

    p = hw_sub.add_parser("show", help="a description with its derived numbers",
                          epilog="Example: gpusim hw show h100_sxm5_80gb --set gpu.num_sms=144 --json")
    p.add_argument("hardware", metavar="NAME_OR_PATH")
    add_set_argument(p)
    p.add_argument("--json", action="store_true", help="print one JSON object (SI units)")
    p.set_defaults(func=cmd_show)

    p = hw_sub.add_parser("keys", help="every key a description can have: unit, required or default, meaning",
                          epilog="Example: gpusim hw keys --kind gpu | grep dram")
    p.add_argument("--kind", choices=("gpu", "cpu", "system"), default="gpu",
                   help="which kind of description (default gpu)")
    p.add_argument("--json", action="store_true", help="print one JSON list")
    p.set_defaults(func=cmd_keys)

    p = hw_sub.add_parser("compare", help="side-by-side table of derived numbers",
                          epilog="Example: gpusim hw compare v100_sxm2_32gb a100_sxm4_80gb h100_sxm5_80gb")
    p.add_argument("hardware", metavar="NAME_OR_PATH", nargs="+")
    add_set_argument(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_compare)


def non_negative_int(text: str) -> int:
    """An argparse type: a whole number, 0 or more (how many rows to print)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected 0 or more, got {value}")
    return value


def cmd_keys(args: argparse.Namespace) -> int:
    from gpusim.config.reference import key_rows

    rows = key_rows(args.kind)
    if args.json:
        print(json.dumps([{"key": r.path, "value": r.kind, "required": r.required, "default": r.default,
                           "doc": r.doc} for r in rows], indent=2, default=str))
        return 0
    width = max(len(r.path) for r in rows)
    for r in rows:
        need = "required" if r.required else ("optional" if r.default is None else f"default {r.default}")
        line = f"{r.path:<{width}}  {r.kind}; {need}"
        print(line + (f". {r.doc}" if r.doc else ""))
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    rows = []
    for name, path in list_hardware():
        data = read_description(path)  # with its extends: chain, which may give the kind
        rows.append((name, str(data.get("kind", "?")), display_path(path, "hwconfigs"), str(data.get("description", ""))))
    width = max(len(r[0]) for r in rows)
    for name, kind, path, description in rows:
        print(f"{name:<{width}}  {kind:<6}  {description}")
    return 0


_ROWS: list[tuple[str, str, str]] = [
    ("kind", "kind", ""),
    ("num_sms", "SMs / CUs / cores", ""),
    ("num_fp32_lanes", "FP32 lanes", ""),
    ("peak_flop_per_s.fp64", "peak FP64", "flop_per_s"),
    ("peak_flop_per_s.fp32", "peak FP32", "flop_per_s"),
    ("peak_flop_per_s.tf32", "peak TF32", "flop_per_s"),
    ("peak_flop_per_s.fp16", "peak FP16", "flop_per_s"),
    ("peak_flop_per_s.bf16", "peak BF16", "flop_per_s"),
    ("peak_flop_per_s.fp8", "peak FP8", "flop_per_s"),
    ("peak_flop_per_s.int8", "peak INT8", "op_per_s"),  # integer operations, not floating-point
    ("peak_flop_per_s.fp4", "peak FP4", "flop_per_s"),
    ("sustained_tensor_clock_hz", "tensor clock in GEMMs", "hz"),
    ("dram_bandwidth_bytes_per_s", "DRAM bandwidth", "bytes_per_s"),
    ("dram_capacity_bytes", "DRAM capacity", "bytes"),
    ("l2_capacity_bytes", "L2 capacity", "bytes"),
    ("l2_bandwidth_bytes_per_s", "L2 bandwidth", "bytes_per_s"),
    ("shared_bandwidth_bytes_per_s", "shared memory bandwidth", "bytes_per_s"),
    ("llc_capacity_bytes", "last-level cache", "bytes"),
    ("ridge_point_flop_per_byte.fp32", "ridge FP32 (FLOP/B)", "dimensionless"),
    ("ridge_point_flop_per_byte.bf16", "ridge BF16 (FLOP/B)", "dimensionless"),
    ("peer_bandwidth_bytes_per_s", "peer links (per dir)", "bytes_per_s"),
    ("host_link_bandwidth_bytes_per_s", "host link (per dir)", "bytes_per_s"),
    ("tdp_w", "TDP", "w"),
    ("num_gpus", "GPUs", ""),
    ("node_network_bandwidth_bytes_per_s", "network per node", "bytes_per_s"),
]


def _lookup(data: dict[str, Any], path: str) -> Any:
    node: Any = data
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _format(value: Any, dimension: str) -> str:
    if value is None:
        return "-"
    if not dimension:
        return f"{value:,}" if isinstance(value, int) else str(value)
    if dimension == "dimensionless":
        return f"{value:.1f}"
    if dimension == "bytes" and value >= 2**20:
        for unit, factor in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20)):
            if value >= factor:
                return f"{value / factor:.4g} {unit}"
    return format_quantity(value, dimension)


def _table(summaries: list[dict[str, Any]]) -> str:
    header = ["", *[s["name"] for s in summaries]]
    rows = [header]
    for path, label, dim in _ROWS:
        values = [_lookup(s, path) for s in summaries]
        if all(v is None for v in values):
            continue
        rows.append([label, *[_format(v, dim) for v in values]])
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
                     for r in rows)


def cmd_show(args: argparse.Namespace) -> int:
    desc = load_hardware(args.hardware, args.overrides)
    info = summary(desc)
    if args.json:
        info["spec"] = desc.model_dump(mode="json")
        print(json.dumps(info, indent=2, sort_keys=False))
        return 0
    print(f"{desc.name}: {desc.description}")
    print(_table([info]))
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from gpusim.errors import ConfigError

    if len(args.hardware) < 2:
        raise ConfigError("command line", "HW", "give two or more descriptions to compare (`gpusim hw show NAME` "
                                                "shows one)")
    infos = []
    for name in args.hardware:
        try:
            infos.append(summary(load_hardware(name, args.overrides)))
        except ConfigError as exc:
            if exc.source == SET_SOURCE:  # a --set key this description does not have: say which one
                raise ConfigError(exc.source, exc.key_path, f"{exc.message} (in {name})") from None
            raise
    if args.json:
        print(json.dumps(infos, indent=2))
        return 0
    print(_table(infos))
    return 0
