"""The release spec, ``releases/<name>.toml``: which episodes, how they are split, how packed.

A spec has four tables (every key optional unless said; an unknown key or a bad value is
refused with `SpecError` naming the file and the key)::

    [release]
    licence = "CC-BY-4.0"            # required: the licence line of the release
    description = "bracket assembly, Vision Pro and Quest"
    formats = ["webdataset"]         # export policy keys: webdataset, robomimic, lerobot

    [select]                         # every given filter must hold (AND); lists are "any of"
    tasks = ["bracket assembly"]
    source_kinds = ["visionpro", "quest"]
    devices = ["..."]
    demonstrators = ["d01", "d02"]
    captured_from = 2026-03-01       # capture start date (UTC), inclusive
    captured_to = 2026-12-31         # inclusive
    quality = ["pass", "warn"]       # quality verdicts
    gate = ["allowed"]               # the export gate's decision (default: allowed only)
    waived = true                    # only waived (true) or only unwaived (false) episodes
    source_datasets = ["egodex"]     # the importer's source dataset
    where = "duration_s > 10"        # a SQL condition over the catalog's `episodes` model

    [split]
    by = "episode"                   # episode | demonstrator | task
    seed = 0
    fractions = { train = 0.9, valid = 0.1 }

    [actions]                        # the declared state/action space (`ActionSpace`)
    space = "eef_pose_gripper"       # source (default) | eef_pose_gripper | fingertips
    frame = "head"                   # head | world
    hands = "both"                   # both | left | right | dominant
    rotation = "rot6d"               # rot6d | xyzw
    horizon = 1                      # future samples per action
    relative = false
    gripper_close_m = 0.03           # and gripper_open_m (hysteresis), fps

A spec without ``[actions]`` (or with ``space = "source"``) packs each format's own
vectors; its JSON (`ReleaseSpec.to_json`) has no ``actions`` table then, so a release
cut before the table existed keeps its inputs hash and its bytes.

The split of an episode is a function of (seed, group key) alone (`assign_split`), so an
episode keeps its split when the release grows or shrinks.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import math
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ego_assets.actions import ActionSpace, ActionSpaceError
from ego_assets.exports import registry

RELEASES_DIR = "releases"
SPLIT_BY = ("episode", "demonstrator", "task")
QUALITY_VERDICTS = ("pass", "warn", "fail", "pending")
GATE_DECISIONS = ("allowed", "blocked", "pending")
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
SPLIT_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
TABLES = ("release", "select", "split", "actions")
RELEASE_KEYS = ("licence", "description", "formats")
LIST_FILTERS = {  # spec key -> column of `episodes`
    "tasks": "task",
    "source_kinds": "source_kind",
    "devices": "device",
    "demonstrators": "demonstrator",
    "source_datasets": "source_dataset",
    "quality": "quality_status",
    "gate": "gate",
}
SELECT_KEYS = (*LIST_FILTERS, "captured_from", "captured_to", "waived", "where")
SPLIT_KEYS = ("by", "seed", "fractions")
NO_GROUP = "(none)"  # the group key of an episode without a demonstrator or task


class SpecError(ValueError):
    """A release spec that cannot be used; the message names the file and the key."""


@dataclass(frozen=True, slots=True)
class Selection:
    """The ``[select]`` table: filters over the catalog's ``episodes`` model (AND)."""

    lists: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # column -> any of
    captured_from: dt.date | None = None
    captured_to: dt.date | None = None
    waived: bool | None = None
    where: str | None = None


@dataclass(frozen=True, slots=True)
class SplitRule:
    """The ``[split]`` table: episodes grouped by ``by``, each group hashed with ``seed``."""

    by: str = "episode"
    seed: int = 0
    fractions: tuple[tuple[str, float], ...] = (("train", 0.9), ("valid", 0.1))


@dataclass(frozen=True, slots=True)
class ReleaseSpec:
    """A parsed, validated release spec (see the module docstring)."""

    name: str
    licence: str
    description: str = ""
    formats: tuple[str, ...] = ("webdataset",)  # export policy keys
    selection: Selection = field(default_factory=Selection)
    split: SplitRule = field(default_factory=SplitRule)
    actions: ActionSpace = field(default_factory=ActionSpace)

    def export_names(self) -> tuple[str, ...]:
        """The registry names (``egosmith_shards``...) of the release's formats."""
        by_policy = {f.policy_key: f.name for f in registry.formats()}
        return tuple(by_policy[p] for p in self.formats)

    def to_json(self) -> dict[str, Any]:
        """The spec as plain JSON values (kept in the manifest; dates as ISO text)."""
        sel = self.selection
        select: dict[str, Any] = {
            k: list(sel.lists[c]) for k, c in LIST_FILTERS.items() if c in sel.lists
        }
        if sel.captured_from is not None:
            select["captured_from"] = sel.captured_from.isoformat()
        if sel.captured_to is not None:
            select["captured_to"] = sel.captured_to.isoformat()
        if sel.waived is not None:
            select["waived"] = sel.waived
        if sel.where is not None:
            select["where"] = sel.where
        out: dict[str, Any] = {
            "release": {
                "licence": self.licence,
                "description": self.description,
                "formats": list(self.formats),
            },
            "select": select,
            "split": {
                "by": self.split.by,
                "seed": self.split.seed,
                "fractions": dict(self.split.fractions),
            },
        }
        if self.actions.derived:  # `source`: the JSON (and inputs hash) of before [actions]
            out["actions"] = self.actions.to_json()
        return out


def spec_path(root: Path, name: str) -> Path:
    """``<root>/releases/<name>.toml``."""
    return Path(root) / RELEASES_DIR / f"{name}.toml"


def spec_names(root: Path) -> list[str]:
    """The release names of the specs ``<root>/releases/<name>.toml`` (valid names, sorted)."""
    folder = Path(root) / RELEASES_DIR
    if not folder.is_dir():
        return []
    return sorted(p.stem for p in folder.glob("*.toml") if NAME_RE.fullmatch(p.stem))


def load_spec(path: Path, name: str | None = None) -> ReleaseSpec:
    """Parse and validate the spec file ``path`` (release name: ``name`` or the file's stem).

    Raises:
        SpecError: the file is missing, not TOML, or a key is unknown or has a bad value.
    """
    path = Path(path)
    if not path.is_file():
        raise SpecError(f"release spec {path}: no such file")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise SpecError(f"release spec {path}: not TOML: {exc}") from None
    return parse_spec(data, name or path.stem, where=str(path))


def parse_spec(data: Mapping[str, Any], name: str, where: str = "release spec") -> ReleaseSpec:
    """Validate a spec's TOML tables (``where`` names it in errors); see `load_spec`."""

    def fail(key: str, problem: str) -> SpecError:
        return SpecError(f"{where}: {key}: {problem}")

    if not NAME_RE.fullmatch(name):
        raise fail("name", f"{name!r} is not a release name (lower case, digits, '_.-')")
    _unknown(data, TABLES, "", fail)
    for table in TABLES:
        if table in data and not isinstance(data[table], dict):
            raise fail(table, "must be a table")
    release = data.get("release", {})
    _unknown(release, RELEASE_KEYS, "release.", fail)
    licence = release.get("licence")
    if not isinstance(licence, str) or not licence.strip():
        raise fail("release.licence", "required: a non-empty licence line")
    description = release.get("description", "")
    if not isinstance(description, str):
        raise fail("release.description", "must be a string")
    known = [f.policy_key for f in registry.formats()]
    formats = _strings(release.get("formats", ["webdataset"]), "release.formats", fail)
    bad = [f for f in formats if f not in known]
    if bad or not formats or len(set(formats)) != len(formats):
        raise fail(
            "release.formats", f"{list(formats)!r}: give distinct formats among {sorted(known)}"
        )
    return ReleaseSpec(
        name=name,
        licence=licence.strip(),
        description=description,
        formats=formats,
        selection=_selection(data.get("select", {}), fail),
        split=_split(data.get("split", {}), fail),
        actions=_actions(data.get("actions", {}), fail),
    )


def _unknown(table: Mapping[str, Any], allowed: tuple[str, ...], prefix: str, fail: Any) -> None:
    for key in table:
        if key not in allowed:
            raise fail(f"{prefix}{key}", f"unknown key (known: {', '.join(allowed)})")


def _strings(value: Any, key: str, fail: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise fail(key, f"{value!r} must be a list of non-empty strings")
    return tuple(value)


def _date(value: Any, key: str, fail: Any) -> dt.date | None:
    if value is None:
        return None
    if isinstance(value, dt.datetime) or not isinstance(value, dt.date):
        raise fail(key, f"{value!r} must be a TOML date such as 2026-03-01")
    return value


def _selection(table: Mapping[str, Any], fail: Any) -> Selection:
    _unknown(table, SELECT_KEYS, "select.", fail)
    lists = {}
    for key, column in LIST_FILTERS.items():
        if key in table:
            values = _strings(table[key], f"select.{key}", fail)
            if not values:
                raise fail(f"select.{key}", "an empty list selects nothing; leave the key out")
            allowed = {"quality": QUALITY_VERDICTS, "gate": GATE_DECISIONS}.get(key)
            bad = [v for v in values if allowed is not None and v not in allowed]
            if bad:
                raise fail(f"select.{key}", f"{bad!r} not among {list(allowed or ())}")
            lists[column] = values
    lists.setdefault("gate", ("allowed",))
    start = _date(table.get("captured_from"), "select.captured_from", fail)
    end = _date(table.get("captured_to"), "select.captured_to", fail)
    if start is not None and end is not None and end < start:
        raise fail("select.captured_to", f"{end} is before select.captured_from {start}")
    waived = table.get("waived")
    if waived is not None and not isinstance(waived, bool):
        raise fail("select.waived", f"{waived!r} must be true or false")
    where = table.get("where")
    if where is not None and (not isinstance(where, str) or not where.strip() or ";" in where):
        raise fail("select.where", f"{where!r} must be one SQL condition (no ';')")
    return Selection(lists, start, end, waived, where)


def _split(table: Mapping[str, Any], fail: Any) -> SplitRule:
    _unknown(table, SPLIT_KEYS, "split.", fail)
    by = table.get("by", "episode")
    if by not in SPLIT_BY:
        raise fail("split.by", f"{by!r} must be one of {list(SPLIT_BY)}")
    seed = table.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise fail("split.seed", f"{seed!r} must be a non-negative integer")
    fractions = table.get("fractions", {"train": 0.9, "valid": 0.1})
    if not isinstance(fractions, dict) or not fractions:
        raise fail("split.fractions", "must be a table of split name = fraction")
    pairs = []
    for split, value in fractions.items():
        if not SPLIT_NAME_RE.fullmatch(split):
            raise fail(f"split.fractions.{split}", "split names are lower case identifiers")
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if not ok or not 0 < value <= 1:
            raise fail(f"split.fractions.{split}", f"{value!r} must be a number in (0, 1]")
        pairs.append((split, float(value)))
    total = math.fsum(v for _, v in pairs)
    if not math.isclose(total, 1.0, abs_tol=1e-9):
        raise fail("split.fractions", f"fractions sum to {total:g}, not 1")
    return SplitRule(by, seed, tuple(pairs))


def _actions(table: Mapping[str, Any], fail: Any) -> ActionSpace:
    try:
        return ActionSpace.from_table(table)
    except ActionSpaceError as exc:
        raise fail(f"actions.{exc.key}", exc.message) from None


def actions_of(spec_json: Mapping[str, Any]) -> ActionSpace:
    """The action space of a manifest's ``spec`` (no ``actions`` table: ``source``)."""
    return ActionSpace(**spec_json["actions"]) if "actions" in spec_json else ActionSpace()


def split_bucket(seed: int, group: str) -> float:
    """A number in [0, 1) from SHA-256 of ``"<seed>:<group>"`` (stable across machines)."""
    digest = hashlib.sha256(f"{seed}:{group}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def assign_split(rule: SplitRule, group: str | None) -> str:
    """The split of group key ``group`` (None: `NO_GROUP`): the first split whose cumulative
    fraction exceeds the group's bucket. Depends on (seed, group) only."""
    bucket = split_bucket(rule.seed, NO_GROUP if group is None else group)
    cumulative = 0.0
    for split, fraction in rule.fractions:
        cumulative += fraction
        if bucket < cumulative:
            return split
    return rule.fractions[-1][0]  # rounding: the sum may be a hair below 1
