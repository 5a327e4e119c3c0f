"""Where the shared real recordings live (read-only): the handy.js Quest poses that the
synthetic hands are built from, and the Project Aria MPS sample used by the demo.

``$EGO_SHARED_DIR`` if set, else the ``shared/`` folder beside the repository (how the
developers' checkouts and CI lay it out).
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def shared_dir() -> Path:
    """The shared folder: ``$EGO_SHARED_DIR`` or ``<repo>/../shared``."""
    return Path(os.environ.get("EGO_SHARED_DIR") or REPO_ROOT.parent / "shared")


def real_fixture(name: str) -> Path:
    """A folder of real recordings under ``shared/fixtures/real`` (e.g. ``handy_js``)."""
    return shared_dir() / "fixtures" / "real" / name
