"""gpusim: a discrete-event simulator of GPU architectures for deep learning."""

__version__ = "0.1.0"
