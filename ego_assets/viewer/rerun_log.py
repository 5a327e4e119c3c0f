"""The logging core of an episode recording: timelines, entity paths, Arrow columns.

`RecordingLog` sends whole columns to a Rerun recording stream on the ``time`` timeline
(seconds since capture start, as ``timedelta64[ns]``) and counts the rows it sent per
entity in a `RecordingSummary`. Every scalar series names the plot it belongs to: one
plot per unit (`PLOTS`), so a plot's y axis never mixes 0/1 flags with metres.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import rerun as rr

TIME = "time"
# One time-series plot per unit, in the layout's order (title -> unit of its y axis).
FLAGS = "tracked, gaps, retries (0/1)"
CONFIDENCE = "confidence (0-1)"
SPEED = "speed (m/s)"
DISTANCE = "distance (m)"
ACCELERATION = "acceleration (m/s²)"
ANGULAR_RATE = "angular rate (rad/s)"
PLOTS = (FLAGS, CONFIDENCE, SPEED, DISTANCE, ACCELERATION, ANGULAR_RATE)


class ArrowBatch:
    """A prebuilt Arrow array as a Rerun component batch."""

    def __init__(self, array: pa.Array) -> None:
        self.array = array

    def as_arrow_array(self) -> pa.Array:
        return self.array


def mat3x3_column(descriptor: rr.ComponentDescriptor, mats: np.ndarray) -> rr.ComponentColumn:
    """One 3x3 matrix per row (Rerun stores them column-major, float32), vectorized."""
    flat = np.ascontiguousarray(np.asarray(mats, np.float32).transpose(0, 2, 1)).ravel()
    item = pa.field("item", pa.float32(), nullable=False)
    values = pa.FixedSizeListArray.from_arrays(pa.array(flat), type=pa.list_(item, 9))
    return rr.ComponentColumn(descriptor, ArrowBatch(values))


def to_duration(seconds: np.ndarray) -> np.ndarray:
    """Seconds since capture start as ``timedelta64[ns]``, rounded to the nanosecond
    (``time`` is ``(timestamp_ns - start_ns) / 1e9``, so this gives the source's ns back)."""
    return np.round(np.asarray(seconds, np.float64) * 1e9).astype("timedelta64[ns]")


def entity(parent: str, *names: str) -> str:
    """``/<parent>/<name>...``: ``parent`` is a path, ``names`` are escaped (stream names
    may hold dots or spaces)."""
    tail = "".join(f"/{rr.escape_entity_path_part(n)}" for n in names)
    return "/" + parent.strip("/") + tail


@dataclass
class RecordingSummary:
    """What went into a recording: entity -> rows logged (static rows not counted).

    Attributes:
        path: the ``.rrd`` file.
        rows: entity path -> number of temporal rows.
        videos: media role -> entity path of its video.
        notes: things the recording could not show, in words.
        plots: plot title (`PLOTS`) -> entity paths of its scalar series.
    """

    path: Path
    rows: dict[str, int] = field(default_factory=dict)
    videos: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    plots: dict[str, list[str]] = field(default_factory=dict)


class RecordingLog:
    """Sends columns to one recording stream and counts them in its summary."""

    def __init__(self, rec: rr.RecordingStream, summary: RecordingSummary) -> None:
        self.rec = rec
        self.summary = summary

    def static(self, path: str, archetype: rr.AsComponents) -> None:
        self.rec.log(path, archetype, static=True, strict=True)

    def send(
        self,
        path: str,
        times: np.ndarray,
        columns: Iterable[rr.ComponentColumn],
        extra: Sequence[rr.TimeColumn] = (),
        *,
        count: bool = True,
    ) -> None:
        """Send columns on the ``time`` timeline (+ ``extra``); ``count``: add to the rows."""
        self.rec.send_columns(
            path,
            indexes=[rr.TimeColumn(TIME, duration=to_duration(times)), *extra],
            columns=list(columns),
            strict=True,
        )
        if count:
            key = entity(path)
            self.summary.rows[key] = self.summary.rows.get(key, 0) + len(times)

    def scalars(
        self, path: str, times: np.ndarray, values: np.ndarray, name: str, plot: str
    ) -> None:
        """A series (or one per column of 2-D ``values``, named x, y, z) in ``plot``."""
        values = np.asarray(values, np.float64)
        names = [name] if values.ndim == 1 else [f"{name} {a}" for a in "xyz"[: values.shape[1]]]
        self.static(path, rr.SeriesLines(names=names))
        self.send(path, times, rr.Scalars.columns(scalars=values))
        self.summary.plots.setdefault(plot, []).append(entity(path))

    def step_series(self, path: str, spans: Sequence[tuple[float, float]], name: str) -> None:
        """A 0/1 series: 1 from each span's start (s) to its end, 0 after it."""
        if not spans:
            return
        starts = np.array([s for s, _ in spans], np.float64)
        ends = np.array([e for _, e in spans], np.float64)
        times = np.stack([starts, ends], axis=1).ravel()
        values = np.tile([1.0, 0.0], len(spans))
        order = np.argsort(times, kind="stable")
        self.scalars(path, times[order], values[order], name, FLAGS)

    def text_log(
        self, path: str, times: Sequence[float], texts: Sequence[str], levels: Sequence[str]
    ) -> None:
        """Text log entries at ``times`` (s), sorted by time; nothing when empty."""
        if not len(times):
            return
        order = np.argsort(np.asarray(times, np.float64), kind="stable")
        self.send(
            path,
            np.asarray(times, np.float64)[order],
            rr.TextLog.columns(text=[texts[i] for i in order], level=[levels[i] for i in order]),
        )

    def text_spans(self, path: str, spans: Sequence[tuple[float, float, str]]) -> None:
        """A text document that holds each span's text from its start (s) to its end."""
        rows = sorted(
            [(s, text) for s, _, text in spans] + [(e, "") for _, e, _ in spans],
            key=lambda r: (r[0], r[1] != ""),
        )
        self.send(
            path,
            np.array([r[0] for r in rows], np.float64),
            rr.TextDocument.columns(text=[r[1] or "(none)" for r in rows]),
        )
