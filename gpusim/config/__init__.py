"""Validated, frozen hardware descriptions and the YAML loading machinery."""

from gpusim.config.derived import summary
from gpusim.config.hardware import CpuDescription, GpuDescription, HardwareDescription, SystemDescription
from gpusim.config.library import list_hardware, load_hardware

__all__ = [
    "CpuDescription",
    "GpuDescription",
    "HardwareDescription",
    "SystemDescription",
    "list_hardware",
    "load_hardware",
    "summary",
]
