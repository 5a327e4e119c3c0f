"""Progress of long library work (hashing a capture, rendering synthetic video).

Library code calls `report` as it goes; nothing happens unless a caller listens with
`listening` (the CLI shows a progress bar on a terminal). The listener lives in a
context variable, so concurrent runs in one process never see each other's progress.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

# (task, done, total): a short task name and its progress in the task's own unit
Listener = Callable[[str, int, int], None]

_listener: ContextVar[Listener | None] = ContextVar("ego_assets_progress", default=None)


@contextmanager
def listening(listener: Listener) -> Iterator[None]:
    """Send every `report` made inside the block to ``listener``."""
    token = _listener.set(listener)
    try:
        yield
    finally:
        _listener.reset(token)


def report(task: str, done: int, total: int) -> None:
    """``done`` of ``total`` units of ``task`` are finished (no-op without a listener)."""
    listener = _listener.get()
    if listener is not None:
        listener(task, done, total)


# The phases of an export step, reported by the exporters as tasks: reading the stored
# trajectory and raw media (local copies on S3), writing the artefact, uploading it.
READ_TASK = "read"
WRITE_TASK = "write"
UPLOAD_TASK = "upload"
# Share of an export each phase spans in `export_fraction` (reading and uploading are one
# step each; writing reports its own units, e.g. sections or frames).
EXPORT_PHASES: dict[str, tuple[float, float]] = {
    READ_TASK: (0.0, 0.1),
    WRITE_TASK: (0.1, 0.9),
    UPLOAD_TASK: (0.9, 1.0),
}


def export_fraction(task: str, done: int, total: int) -> float | None:
    """Overall 0-1 progress of an export from one report of one of its phases.

    None for a task that is not an export phase (e.g. hashing while reading).
    """
    span = EXPORT_PHASES.get(task)
    if span is None:
        return None
    start, end = span
    share = min(max(done / total, 0.0), 1.0) if total > 0 else 1.0
    return start + (end - start) * share
