"""Plausible ranges of the clocks and numbers a capture carries, and their checks.

A time outside its clock's range is a format error, not a data fault: it cannot come
from a working recorder, and converting it would wrap int64 or silently become the
capture's start. A backwards or repeated step *inside* the range stays a data fault,
kept and flagged (`ego_assets.trajectory.streams.SampleFlag`). The ranges
(``docs/capture-formats.md``, "What is rejected and what is kept"):

* Unix time (holos ``mono_origin_epoch_ns``, webxr ``time_origin_epoch_ms``, mano-video
  ``timestamp_ns``): 2000-01-01 to 2100-01-01;
* device monotonic seconds since boot (holos ``t_mono_s``, ``capture_start_mono_s``,
  VLM ``t_mono``) and the Aria device clock (``tracking_timestamp_us``): 0 to 1e8 s
  (about 3 years of uptime);
* webxr ``t_ms`` since the session's time origin: 0 to 1e10 ms (about 115 days);
* seconds since the capture start (transcript, procedure steps): -1e7 to 1e7 s.

Every bound keeps the converted nanoseconds far inside int64.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ego_assets.capture.files import CaptureFiles, number_problem, require


@dataclass(frozen=True, slots=True)
class ClockRange:
    """The closed range ``[lo, hi]`` of plausible values of one clock, in ``unit``.

    Attributes:
        name: what the clock counts, for messages.
        unit: the unit of the values checked (``"ns"``, ``"ms"``, ``"s"``, ``"us"``).
        lo: smallest plausible value.
        hi: largest plausible value.
        span: the range in words (e.g. the calendar dates).
    """

    name: str
    unit: str
    lo: int | float
    hi: int | float
    span: str

    def problem(self, value: Any) -> str | None:
        """Why ``value`` is not a plausible time of this clock, or None."""
        if isinstance(value, bool) or not isinstance(value, int | float | np.number):
            return f"expected a number, got {type(value).__name__}"
        text = number_problem(value)
        if text is not None:
            return text
        if not np.isfinite(value):
            return f"time is {float(value)} (not finite)"
        if not self.lo <= value <= self.hi:
            text = f"{value:.12g}" if isinstance(value, float | np.floating) else str(value)
            return f"time {text} {self.unit} is outside the plausible {self.name} ({self.span})"
        return None


_Y2000_S = 946_684_800
_Y2100_S = 4_102_444_800
EPOCH_NS = ClockRange("Unix time", "ns", _Y2000_S * 10**9, _Y2100_S * 10**9, "2000 to 2100")
EPOCH_MS = ClockRange("Unix time", "ms", _Y2000_S * 10**3, _Y2100_S * 10**3, "2000 to 2100")
DEVICE_S = ClockRange("device uptime", "s", 0, 1e8, "0 to 1e8 s")
DEVICE_US = ClockRange("device uptime", "us", 0, 10**14, "0 to 1e8 s")
SESSION_MS = ClockRange("time since the session origin", "ms", 0, 1e10, "0 to 1e10 ms")
CAPTURE_S = ClockRange("time since the capture start", "s", -1e7, 1e7, "-1e7 to 1e7 s")


def check_time(
    files: CaptureFiles,
    rel: str,
    field: str,
    value: Any,
    clock: ClockRange,
    *,
    row: int | None = None,
) -> Any:
    """``value``, checked to be a plausible time of ``clock`` (else a format error)."""
    problem = clock.problem(value)
    if problem is not None:
        raise files.error(rel, problem, field=field, row=row)
    return value


def check_times(
    files: CaptureFiles, rel: str, field: str, values: np.ndarray, clock: ClockRange
) -> None:
    """Check a (T,) column of times at once; the first bad one names its 1-based row."""
    values = np.asarray(values)
    with np.errstate(invalid="ignore"):
        bad = ~((values >= clock.lo) & (values <= clock.hi))  # NaN compares False
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        check_time(files, rel, field, values[row].item(), clock, row=row + 1)


def check_count(
    files: CaptureFiles,
    rel: str,
    field: str,
    values: np.ndarray,
    lo: int,
    hi: int,
    what: str,
) -> None:
    """Check a (T,) integer column (frame or slot numbers) lies in ``[lo, hi]``."""
    values = np.asarray(values)
    bad = (values < lo) | (values > hi)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        message = f"{what} {values[row].item()} is outside {lo} to {hi}"
        raise files.error(rel, message, field=field, row=row + 1)


def require_number(
    files: CaptureFiles,
    rel: str,
    doc: Mapping[str, Any],
    key: str,
    lo: float,
    hi: float,
    *,
    kind: type | tuple[type, ...] = (int, float),
    row: int | None = None,
) -> float:
    """``doc[key]`` as a float, checked for type (`require`) and to lie in ``[lo, hi]``.

    For numbers whose range is a matter of plausibility: a rate in Hz, an image side in
    pixels, a coefficient count.
    """
    value = require(files, rel, doc, key, kind)
    if not lo <= value <= hi:
        message = f"{value} is outside the plausible range {lo:g} to {hi:g}"
        raise files.error(rel, message, field=key, row=row)
    return float(value)
