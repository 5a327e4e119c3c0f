"""Run one benchmark: ``python -m bench <name> [options]`` (``normalize``, ``quality``...).

Each benchmark is a module ``bench/<name>.py`` with ``main(argv) -> int`` and
``SMOKE_ARGS``, the tiny size at which the suite runs it once
(ego_assets_tests/test_bench_smoke.py), so a change that breaks a bench breaks a test.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path


def available() -> list[str]:
    """Every benchmark's name: the modules of this folder not starting with ``_``."""
    here = Path(__file__).parent
    return sorted(m.name for m in pkgutil.iter_modules([str(here)]) if not m.name.startswith("_"))


# Names that are Python keywords live in a module with a trailing underscore.
ALIASES = {"import": "import_"}


def main(argv: list[str]) -> int:
    names = available()
    if argv and argv[0] in ALIASES:
        argv = [ALIASES[argv[0]], *argv[1:]]
    if not argv or argv[0] not in names:
        print(f"usage: python -m bench {{{','.join(names)}}} [--json FILE]", file=sys.stderr)
        return 2
    module = importlib.import_module(f"bench.{argv[0]}")
    return int(module.main(argv[1:]))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
