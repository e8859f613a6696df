"""Frozen simulation results and their export (JSON, Chrome/Perfetto traces)."""

from gpusim.results.result import KernelRecord, SimulationResult, Span

__all__ = ["KernelRecord", "SimulationResult", "Span"]
