"""Waiting in tests on a busy 2-core machine: wait for the event itself, never a tight
wall-clock deadline.

`wait_for` polls for the thing a test needs (a finished run, a page answering, a state
seen) and returns it as soon as it is there. Its ceiling only bounds a hang: generous
(`CEILING_S`, 15 minutes; `EGO_TEST_CEILING_S` overrides it), and when reached the
failure says what was awaited, for how long, and the last state seen.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TypeVar

import pytest

T = TypeVar("T")

# Bounds a hang, not a duration: a step of a run spent 15-35 s starting its subprocess at
# load 7-30 on 2 cores, so whole runs may take minutes.
CEILING_S = float(os.environ.get("EGO_TEST_CEILING_S", "900"))


def wait_for(
    what: str,
    probe: Callable[[], T | None],
    *,
    ceiling_s: float = CEILING_S,
    interval_s: float = 0.5,
    state: Callable[[], str] | None = None,
) -> T:
    """Call ``probe`` every ``interval_s`` seconds until it returns a value that is not
    None or False; return that value.

    Fails the test after ``ceiling_s`` seconds with "waited N s for <what>", plus
    ``state()`` (e.g. a run's status and last event, a service's log tail) when given.
    ``probe`` may itself fail the test (e.g. when the process it polls has exited).
    """
    started = time.monotonic()
    while True:
        value = probe()
        if value is not None and value is not False:
            return value
        waited = time.monotonic() - started
        if waited >= ceiling_s:
            seen = f"; last seen: {state()}" if state is not None else ""
            pytest.fail(f"waited {waited:.0f} s (ceiling {ceiling_s:.0f} s) for {what}{seen}")
        time.sleep(interval_s)
