"""Error types. Every error a user can cause is a GpusimError whose str() is one line."""

from __future__ import annotations


class GpusimError(Exception):
    """Base class of every error gpusim reports to a user as one line."""


class ConfigError(GpusimError):
    """A hardware or workload description is wrong.

    ``source`` is the file (or ``--set``) the bad value came from, ``key_path`` the dotted path
    of the key inside it (empty when the whole document is wrong).
    """

    def __init__(self, source: str, key_path: str, message: str, further: tuple[str, ...] = ()) -> None:
        self.source = str(source)
        self.key_path = key_path
        self.message = message
        self.further = further
        """The other problems found in the same file, one line each (``gpusim check`` lists them all)."""
        super().__init__(self.__str__())

    def moved(self, source: str | None = None, key_path: str | None = None) -> "ConfigError":
        """The same error (same class, message and further lines) blamed on another source or key path."""
        return type(self)(self.source if source is None else source,
                          self.key_path if key_path is None else key_path, self.message, self.further)

    def __str__(self) -> str:  # one line, always
        text = f"{self.source}: {self.key_path}: {self.message}" if self.key_path else f"{self.source}: {self.message}"
        return " ".join(text.split())


class KeyPathError(ConfigError):
    """A key that names nothing in the description (a misspelling), or names something in both the
    hardware and the workload; ``gpusim sweep`` refuses such a swept key before its first point."""


class UnitError(ValueError):
    """A quantity string has the wrong dimension or cannot be parsed (wrapped into ConfigError)."""


class SimulationError(GpusimError):
    """The simulation cannot run this combination of hardware and workload."""
