"""Quality thresholds: loaded from ``thresholds.toml`` into frozen dataclasses.

Each metric has a warn and a fail limit and a direction (``"max"``: larger is worse,
``"min"``: smaller is worse). `MetricThreshold.classify` turns a value into
``"pass"``, ``"warn"`` or ``"fail"``. The gap and teleport definitions used by the
metrics live in the same file so that every tunable number is in one place.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

THRESHOLDS_FILE = "thresholds.toml"
STATUSES = ("pass", "warn", "fail")
DIRECTIONS = ("max", "min")


@dataclass(frozen=True, slots=True)
class MetricThreshold:
    """Limits of one metric.

    Attributes:
        name: metric name (key in ``[metrics.<name>]``).
        unit: UDUNITS-style unit of the value (``"1"``, ``"s"``, ``"m s-1"``...).
        direction: ``"max"`` (warn/fail above the limit) or ``"min"`` (below).
        warn: warn limit; ``inf``/``-inf`` disables it.
        fail: fail limit; ``inf``/``-inf`` disables it.
    """

    name: str
    unit: str
    direction: str
    warn: float
    fail: float

    def __post_init__(self) -> None:
        if self.direction not in DIRECTIONS:
            raise ValueError(f"threshold {self.name!r}: direction {self.direction!r}")
        if math.isnan(self.warn) or math.isnan(self.fail):
            raise ValueError(f"threshold {self.name!r}: warn and fail must not be NaN")
        looser = self.warn <= self.fail if self.direction == "max" else self.warn >= self.fail
        if not looser:
            raise ValueError(f"threshold {self.name!r}: warn must be looser than fail")

    def classify(self, value: float) -> str:
        """``"fail"``, ``"warn"`` or ``"pass"`` for ``value`` (NaN passes: not measurable)."""
        if math.isnan(value):
            return "pass"
        if self.direction == "max":
            return "fail" if value > self.fail else "warn" if value > self.warn else "pass"
        return "fail" if value < self.fail else "warn" if value < self.warn else "pass"


@dataclass(frozen=True, slots=True)
class Thresholds:
    """Every quality limit, as read from ``thresholds.toml``.

    Attributes:
        version: the file's ``version``.
        gap_factor: an interval is a gap when longer than ``gap_factor`` nominal periods...
        gap_min_s: ...and longer than this many seconds.
        teleport_speed_mps: wrist speed above this (m/s) is a teleport...
        teleport_step_m: ...and so is a wrist sample landing more than this (m) away from
            where the previous pair's velocity puts it (any sample rate).
        metrics: one `MetricThreshold` per metric, in file order.
    """

    version: int
    gap_factor: float
    gap_min_s: float
    teleport_speed_mps: float
    teleport_step_m: float
    metrics: tuple[MetricThreshold, ...]

    def __post_init__(self) -> None:
        if self.gap_factor <= 1.0 or self.gap_min_s < 0:
            raise ValueError("thresholds: gap.factor must be > 1 and gap.min_s >= 0")
        if min(self.teleport_speed_mps, self.teleport_step_m) <= 0:
            raise ValueError("thresholds: teleport limits must be > 0")

    def metric(self, name: str) -> MetricThreshold:
        """The limits of metric ``name`` (KeyError naming the known metrics otherwise)."""
        for m in self.metrics:
            if m.name == name:
                return m
        raise KeyError(f"no threshold for metric {name!r}; known: {[m.name for m in self.metrics]}")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Thresholds:
        """Build from the parsed TOML document (ValueError naming the bad key)."""
        try:
            metrics = tuple(
                MetricThreshold(
                    name=name,
                    unit=str(spec["unit"]),
                    direction=str(spec["direction"]),
                    warn=float(spec["warn"]),
                    fail=float(spec["fail"]),
                )
                for name, spec in data["metrics"].items()
            )
            return cls(
                version=int(data["version"]),
                gap_factor=float(data["gap"]["factor"]),
                gap_min_s=float(data["gap"]["min_s"]),
                teleport_speed_mps=float(data["teleport"]["speed_mps"]),
                teleport_step_m=float(data["teleport"]["step_m"]),
                metrics=metrics,
            )
        except KeyError as exc:
            raise ValueError(f"thresholds: missing key {exc.args[0]!r}") from exc


@cache
def default_thresholds() -> Thresholds:
    """The packaged ``ego_assets/quality/thresholds.toml`` (read once per process)."""
    text = resources.files("ego_assets.quality").joinpath(THRESHOLDS_FILE).read_text("utf-8")
    return Thresholds.from_dict(tomllib.loads(text))
