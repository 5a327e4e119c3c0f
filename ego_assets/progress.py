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
