"""The eqxrl version (one place: the package, run directories and checkpoints read it here)."""

from typing import Any

__version__ = "0.3.0"


def version_note(record: Any) -> str:
    """What a refusal of a file adds when another eqxrl wrote it: `""` when `record` (a
    `config.json`, a checkpoint's or a save's metadata, as read from JSON) names this version, otherwise
    `" (written by eqxrl 0.2.0; this is eqxrl 0.3.0)"`, so that a file an earlier eqxrl
    wrote is refused in one line that says which version wrote it. A record that names no
    version (a config a user wrote for `eqxrl train --config`) adds nothing."""
    version = record.get("eqxrl_version") if isinstance(record, dict) else None
    if not isinstance(version, str) or version == __version__:  # (a file a user wrote names none)
        return ""
    return f" (written by eqxrl {version}; this is eqxrl {__version__})"
