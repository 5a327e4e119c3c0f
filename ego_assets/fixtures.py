"""The real recordings shipped inside the package (read-only): the handy.js Quest poses
that the synthetic hands are built from, and the Project Aria MPS hand-tracking sample
used by the demo and the tests. Each folder carries its licence and an origin note.
"""

from __future__ import annotations

from pathlib import Path

RECORDINGS_DIR = Path(__file__).resolve().parent / "recordings"


def real_fixture(name: str) -> Path:
    """A folder of real recordings under ``ego_assets/recordings`` (e.g. ``handy_js``)."""
    return RECORDINGS_DIR / name
