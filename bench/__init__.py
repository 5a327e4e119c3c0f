"""Benchmarks: `python -m bench <name> [--json FILE]`, each printing a table."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger("bench")


def name_value_table(rows: Sequence[tuple[str, str]]) -> str:
    """Two aligned columns: a label and its figure per line."""
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


def report(table: str, result: dict[str, Any], json_path: Path | None) -> None:
    """Log ``table`` and, when asked, write ``result`` as JSON to ``json_path``."""
    log.info("%s", table)
    if json_path is not None:
        json_path.write_text(json.dumps(result, indent=1) + "\n")
