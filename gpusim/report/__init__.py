"""Text tables and matplotlib plots of simulation results (matplotlib is imported inside functions)."""
