"""What one warp of a compiled kernel issues, waits on and loads between its round trips to memory,
read statically from its SASS (the machine code ``nvdisasm -c`` prints).

gpusim's own Numba kernels are not the library kernels their plans describe: Numba computes every
index in 64-bit integers, loads one scalar at a time and, where a loaded value is used at once, waits
for it before issuing anything else. Their plans simulate what a well-written kernel with the same
tiles would take; their compiled code says what these kernels take. This module reads that code.

The model of one warp (all warps of these kernels run the same path):

* it issues its instructions in order, one per cycle;
* an instruction waits until the registers and predicates it reads are written: a fixed-latency
  arithmetic or logic instruction's result is ready ``ALU_RESULT_CYCLES`` after issue, a shared-
  memory load's after the device's shared-memory latency, and the others' after the cycles in
  ``RESULT_CYCLES``;
* a global load's result is ready only after a round trip to memory, which the engine times (L2 or
  DRAM latency, Little's law; :func:`gpusim.engine.kernel._latency_cap_rate`): the walk counts one
  round trip each time an instruction reads the result of a load still outstanding (all the loads
  outstanding then arrive together) and lets it issue at once.

The cycles an instruction waits are the warp's stalls: the scheduler may issue other warps' work
meanwhile (the engine's mean-value analysis of the scheduler, :func:`gpusim.engine.kernel.
scheduler_residence_s`, takes them as part of the warp's delay). Branches are not followed: a
straight run of code is walked as written (the in-bounds path of a guarded load executes the load),
and loops are walked once and multiplied by their iteration counts by the caller, who knows them
(:mod:`gpusim.cuda_backend.code`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ALU_RESULT_CYCLES = 4
"""Cycles from issue until a dependent instruction may use the result of a fixed-latency integer,
logic or FP32 instruction (IADD3, IMAD, LOP3, SHF, FFMA, ...): 4 on Volta (Jia et al., "Dissecting
the NVIDIA Volta GPU Architecture via Microbenchmarking", arXiv:1804.06826, Table 4.1), taken for the
later architectures too, whose microbenchmark studies (Luo et al., "Benchmarking and Dissecting the
Nvidia Hopper GPU Architecture", arXiv:2402.13499) report latencies of the same few cycles. 64-bit
results of opcodes that do not name their width (FP64 arithmetic) are tracked as one register."""

RESULT_CYCLES = {
    # variable-latency units: the special-function unit (MUFU: exp2, rcp, rsqrt, tanh) and
    # conversions through it, special-register and constant reads (estimates of the same order as the
    # microbenchmarks above report)
    "MUFU": 18, "F2F": 6, "F2I": 6, "I2F": 6, "I2FP": 6, "F2FP": 6, "FRND": 6,
    "S2R": 20, "S2UR": 20, "CS2R": 4, "LDC": 8, "ULDC": 8,
}

SHARED_LOADS = ("LDS", "LDSM")
GLOBAL_LOADS = ("LDG", "LD")
NO_RESULT = ("ST", "STS", "STG", "STL", "RED", "REDG", "BAR", "BRA", "BSSY", "BSYNC", "EXIT", "NOP", "MEMBAR",
             "WARPSYNC", "CALL", "RET", "DEPBAR", "ERRBAR", "CCTL", "FENCE", "YIELD")
"""Opcodes that write no register (stores, barriers, control flow)."""
NOT_ISSUED = ("BSSY", "BSYNC")
"""Convergence bookkeeping the walk skips (they set up reconvergence, they do no work)."""
PREDICATE_DESTINATIONS = ("ISETP", "FSETP", "DSETP", "HSETP2", "PLOP3", "PSETP", "UISETP", "UPLOP3", "FCHK")
"""Opcodes whose first two operands are the predicates they write."""

_LINE = re.compile(r"^\s*/\*([0-9a-f]+)\*/\s+(@!?U?P[T0-9]\s+)?([A-Z0-9_.]+)\s*(.*?)\s*;")
_LABEL = re.compile(r"^\s*\.(L_x_\d+):")
_REGISTER = re.compile(r"\b(UR\d+|R\d+|UP\d|P\d)\b")
_BRANCH_TARGET = re.compile(r"\(\.?(L_x_\d+)\)")


@dataclass(frozen=True)
class Instruction:
    address: int
    guard: str
    """The predicate guard (``@P0``, ``@!P1``), or empty."""
    opcode: str
    """With its modifiers (``LDG.E``, ``IMAD.WIDE.U32``)."""
    operands: tuple[str, ...]

    @property
    def base(self) -> str:
        return self.opcode.split(".")[0]

    def _result_width(self) -> int:
        """Registers one result spans (64-bit results write a pair, 128-bit loads four)."""
        if ".128" in self.opcode:
            return 4
        if ".WIDE" in self.opcode or ".64" in self.opcode:
            return 2
        return 1

    def destinations_and_sources(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(registers and predicates written, those read). ``RZ``, ``PT`` and their uniform forms
        are constants; a 64-bit address ``[R4.64]`` reads R4 and R5."""
        sources = list(_registers(self.guard.lstrip("@!"))) if self.guard else []
        if self.base in NO_RESULT:
            return (), tuple(sources) + tuple(r for o in self.operands for r in _registers(o))
        if self.base in PREDICATE_DESTINATIONS:
            written = tuple(r for o in self.operands[:2] for r in _registers(o))
            return written, tuple(sources) + tuple(r for o in self.operands[2:] for r in _registers(o))
        written = []
        first = self.operands[0] if self.operands else ""
        for r in _registers(first):
            if r[0] in "UR" and not r.startswith("UP"):
                prefix = "UR" if r.startswith("UR") else "R"
                number = int(r[len(prefix):])
                written += [f"{prefix}{number + i}" for i in range(self._result_width())]
            else:
                written.append(r)
        rest = 1
        while rest < len(self.operands) and re.fullmatch(r"!?U?P\d", self.operands[rest]):
            written.append(self.operands[rest].lstrip("!"))  # a carry or predicate output
            rest += 1
        return tuple(written), tuple(sources) + tuple(r for o in self.operands[rest:] for r in _registers(o))

    def branch_target(self) -> str | None:
        if self.base != "BRA" or not self.operands:
            return None
        match = _BRANCH_TARGET.search(self.operands[-1])
        return match.group(1) if match else None


def _registers(operand: str) -> tuple[str, ...]:
    found = []
    for r in _REGISTER.findall(operand):
        if r.startswith(("UP", "P")):
            found.append(r)
            continue
        prefix = "UR" if r.startswith("UR") else "R"
        number = int(r[len(prefix):])
        found.append(r)
        if re.search(rf"\b{r}\.64\b", operand):  # a 64-bit address in a register pair
            found.append(f"{prefix}{number + 1}")
    return tuple(found)


def _split_operands(text: str) -> tuple[str, ...]:
    out, depth, current = [], 0, ""
    for ch in text:
        depth += ch in "[("
        depth -= ch in "])"
        if ch == "," and depth == 0:
            out.append(current.strip())
            current = ""
        else:
            current += ch
    if current.strip():
        out.append(current.strip())
    return tuple(out)


def parse_sass(text: str) -> tuple[tuple[Instruction, ...], dict[str, int]]:
    """The instructions of ``nvdisasm -c`` output (one kernel) in address order, and each label's
    index (the instruction it precedes)."""
    instructions: list[Instruction] = []
    labels: dict[str, int] = {}
    for line in text.splitlines():
        label = _LABEL.match(line)
        if label:
            labels[label.group(1)] = len(instructions)
            continue
        match = _LINE.match(line)
        if match:
            address, guard, opcode, operands = match.groups()
            instructions.append(Instruction(int(address, 16), (guard or "").strip(), opcode,
                                            _split_operands(operands) if operands else ()))
    return tuple(instructions), labels


@dataclass(frozen=True)
class WarpPath:
    """What one warp does along a run of code."""

    instructions: float
    """Warp instructions issued."""
    cycles: float
    """Cycles from its first issue to its last, round trips to memory excluded."""
    round_trips: float
    """Times it waits for global loads (the loads outstanding then arrive together)."""
    loads: float
    """Global load instructions issued."""

    @property
    def stall_cycles(self) -> float:
        """Cycles it issues nothing, waiting on its own instructions' results."""
        return self.cycles - self.instructions

    def __add__(self, other: WarpPath) -> WarpPath:
        return WarpPath(self.instructions + other.instructions, self.cycles + other.cycles,
                        self.round_trips + other.round_trips, self.loads + other.loads)

    def times(self, count: float) -> WarpPath:
        return WarpPath(self.instructions * count, self.cycles * count, self.round_trips * count, self.loads * count)


NOTHING = WarpPath(0.0, 0.0, 0.0, 0.0)


def result_cycles(instruction: Instruction, shared_latency_cycles: float) -> float:
    """Cycles after issue until ``instruction``'s result may be used (global loads: see the module)."""
    if instruction.base in SHARED_LOADS:
        return shared_latency_cycles
    return RESULT_CYCLES.get(instruction.base, ALU_RESULT_CYCLES)


def walk(instructions: tuple[Instruction, ...], start: int, stop: int, shared_latency_cycles: float) -> WarpPath:
    """One warp issuing ``instructions[start:stop]`` in order (see the module for the model)."""
    t = 0.0
    ready: dict[str, float] = {}
    outstanding: set[str] = set()
    issued = trips = loads = 0
    for ins in instructions[start:stop]:
        if ins.base in NOT_ISSUED:
            continue
        written, read = ins.destinations_and_sources()
        if outstanding.intersection(read):
            trips += 1
            outstanding.clear()
        t = max([t] + [ready.get(r, 0.0) for r in read])
        issued += 1
        if ins.base in GLOBAL_LOADS:
            loads += 1
            outstanding.update(written)
            for r in written:
                ready[r] = t + 1.0
        else:
            for r in written:
                ready[r] = t + result_cycles(ins, shared_latency_cycles)
        t += 1.0
    if outstanding:
        trips += 1
    return WarpPath(float(issued), t, float(trips), float(loads))


def loops(instructions: tuple[Instruction, ...], labels: dict[str, int]) -> list[tuple[int, int]]:
    """Every loop as (index of its first instruction, index after its backward branch), in address order."""
    found = []
    for index, ins in enumerate(instructions):
        target = ins.branch_target()
        if target is not None and labels.get(target, index + 1) <= index:
            found.append((labels[target], index + 1))
    return sorted(found)


def innermost_loops(instructions: tuple[Instruction, ...], labels: dict[str, int]) -> list[tuple[int, int]]:
    """The loops that hold no other loop."""
    every = loops(instructions, labels)
    return [a for a in every if not any(b != a and a[0] <= b[0] and b[1] <= a[1] for b in every)]


def count(instructions: tuple[Instruction, ...], start: int, stop: int, base: str) -> int:
    """Instructions of opcode ``base`` in ``instructions[start:stop]``."""
    return sum(1 for ins in instructions[start:stop] if ins.base == base)
