"""The eqxrl version (one place: the package, run directories and checkpoints read it here)."""

__version__ = "0.2.0"
