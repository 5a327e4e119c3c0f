"""Captures as Dagster partitions, in bounded sets, and the platform's only ways to touch them.

One capture is one partition key (the capture key). The captures of a deployment are
split over ``EGO_CAPTURE_SETS`` partition sets (`ego_assets.capture_sets`: a jump
consistent hash of the key, no lookup): set 0 is the partitions definition ``captures``
with the unprefixed per-capture assets (``raw_capture``, ``trajectory``, ...); set
``i >= 1`` is ``captures_s{i:03d}`` with the same assets under the key prefix
``s{i:03d}`` (``s001/trajectory``), their own group and jobs. With the default of one set
this is exactly the layout from before sets existed. Sets keep every asset's partition
count bounded (Dagster's asset partitions page lists every key of the definition; see
``docs/scale.md``); files are stored by capture key and step only, so the set a capture
is in never changes where its data is.

Every caller that turns a capture key into a Dagster partition (the landing sensor, the
CLI, the stale-code sensor, the HTTP API) goes through `partition_for_capture`; every
caller that registers captures goes through `register_captures`. Both cost O(keys given),
never O(partitions registered): the platform avoids every Dagster call that lists a whole
definition (``get_dynamic_partitions``, ``get_partition_keys``).
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import dagster as dg

from ego_assets.capture_sets import capture_set, capture_sets_from_env, set_prefix
from ego_assets.dagster_compat import (
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
    PARTITION_NAME_TAG,
    PARTITION_SET_TAG,
    dynamic_partitions_after,
    dynamic_partitions_mark,
    insert_dynamic_partitions_postgres,
)
from ego_assets.keys import validate_capture_key

CAPTURES_PARTITIONS_NAME = "captures"
captures_partitions = dg.DynamicPartitionsDefinition(name=CAPTURES_PARTITIONS_NAME)
CAPTURE_JOB = "capture_job"
# Captures per packed run (`packed_run_requests`): ``EGO_CAPTURES_PER_RUN``, default 16.
CAPTURES_PER_RUN_ENV = "EGO_CAPTURES_PER_RUN"
DEFAULT_CAPTURES_PER_RUN = 16
PACKED_TAG = "ego/packed"  # on a packed run: how many captures it runs
CAPTURES_TAG = "ego/captures"  # on a packed run: its capture keys, comma-separated, in order

# Keys per page when the platform walks the registered captures (stale-code sensor,
# migration): one bounded query per page.
PAGE_SIZE = 10_000
_SET_PREFIX = re.compile(r"s(\d{3})")


@functools.cache
def configured_sets() -> int:
    """``EGO_CAPTURE_SETS`` of this process, read once (definitions, CLI, API, sensors)."""
    return capture_sets_from_env(os.environ)


def resolve_sets(sets: int | None) -> int:
    """``sets`` if given, else the configured number."""
    return configured_sets() if sets is None else sets


@functools.cache
def _dynamic(name: str) -> dg.DynamicPartitionsDefinition:
    if name == CAPTURES_PARTITIONS_NAME:
        return captures_partitions
    return dg.DynamicPartitionsDefinition(name=name)


@dataclass(frozen=True, slots=True)
class CaptureSet:
    """One bounded partition set: its partitions definition, asset keys, group and jobs."""

    index: int

    @property
    def prefix(self) -> str:
        """``s001`` for set 1; empty for set 0."""
        return set_prefix(self.index)

    @property
    def partitions_name(self) -> str:
        return (
            f"{CAPTURES_PARTITIONS_NAME}_{self.prefix}" if self.index else CAPTURES_PARTITIONS_NAME
        )

    @property
    def partitions_def(self) -> dg.DynamicPartitionsDefinition:
        return _dynamic(self.partitions_name)

    def key(self, asset_name: str) -> dg.AssetKey:
        """This set's key of a per-capture asset (``s001/trajectory``; set 0: ``trajectory``)."""
        return dg.AssetKey([self.prefix, asset_name]) if self.index else dg.AssetKey(asset_name)

    def group(self, set0_group: str) -> str:
        """Set 0 keeps each asset's own group; every other set has one group of its own."""
        return f"{CAPTURES_PARTITIONS_NAME}_{self.prefix}" if self.index else set0_group

    def job_name(self, set0_name: str) -> str:
        return f"{set0_name}_{self.prefix}" if self.index else set0_name


SET0 = CaptureSet(0)


def all_sets(sets: int | None = None) -> list[CaptureSet]:
    return [CaptureSet(i) for i in range(resolve_sets(sets))]


def set_of_partitions_def(name: str) -> CaptureSet | None:
    """The set whose partitions definition is called ``name`` (None: not a capture set)."""
    if name == CAPTURES_PARTITIONS_NAME:
        return SET0
    suffix = name.removeprefix(f"{CAPTURES_PARTITIONS_NAME}_")
    match = _SET_PREFIX.fullmatch(suffix) if suffix != name else None
    return CaptureSet(int(match.group(1))) if match and int(match.group(1)) else None


def asset_name(asset_key: dg.AssetKey) -> str:
    """The per-capture asset name of any set's key (``s001/trajectory`` -> ``trajectory``)."""
    return asset_key.path[-1]


@dataclass(frozen=True, slots=True)
class CapturePartition:
    """Where one capture lives in Dagster: its set and its partition key."""

    capture_set: CaptureSet
    partition_key: str

    @property
    def partitions_name(self) -> str:
        return self.capture_set.partitions_name


def partition_for_capture(capture_key: str, sets: int | None = None) -> CapturePartition:
    """The set and partition key of a capture (the key itself, validated) among ``sets``
    sets (default: ``EGO_CAPTURE_SETS``)."""
    key = validate_capture_key(capture_key)
    return CapturePartition(CaptureSet(capture_set(key, resolve_sets(sets))), key)


def group_by_set(
    capture_keys: Iterable[str], sets: int | None = None
) -> dict[CaptureSet, list[str]]:
    """Capture keys per set, each list in the given order; sets in index order."""
    out: dict[CaptureSet, list[str]] = {}
    for key in capture_keys:
        where = partition_for_capture(key, sets)
        out.setdefault(where.capture_set, []).append(where.partition_key)
    return dict(sorted(out.items(), key=lambda item: item[0].index))


def register_captures(
    instance: dg.DagsterInstance, capture_keys: Sequence[str], sets: int | None = None
) -> list[str]:
    """Add the captures' partitions to their sets (idempotent); returns their keys in the
    given order.

    On Postgres one statement for every set (``INSERT ... ON CONFLICT DO NOTHING``),
    elsewhere one bulk insert per set, whatever the number of registered captures. A sensor
    that returns ``build_add_request`` instead makes the daemon check each key with its
    own query (and its own connection on Postgres, about 40 ms per key on the benchmark
    machine) before the same insert.
    """
    keys = [validate_capture_key(k) for k in capture_keys]
    by_set = group_by_set(keys, sets)
    if len(by_set) > 1 and _insert_postgres(instance, by_set):
        return keys
    for capture_set_, members in by_set.items():
        instance.add_dynamic_partitions(capture_set_.partitions_name, members)
    return keys


def _insert_postgres(instance: dg.DagsterInstance, by_set: dict[CaptureSet, list[str]]) -> bool:
    """Every set's new keys in one ``INSERT ... ON CONFLICT DO NOTHING`` on a Postgres
    instance (False elsewhere: the caller inserts set by set).

    Dagster's own ``add_dynamic_partitions`` opens a connection per call (~30 ms on the
    benchmark machine), which over 40 sets made a landing tick of 200 captures cost
    1.2-1.6 s instead of ~0.3 s.
    """
    rows = [(cs.partitions_name, key) for cs, members in by_set.items() for key in members]
    return insert_dynamic_partitions_postgres(instance, rows)


def captures_per_run_from_env(environ: Mapping[str, str]) -> int:
    """``EGO_CAPTURES_PER_RUN``: captures per packed run (whole number >= 1; empty: 16)."""
    text = environ.get(CAPTURES_PER_RUN_ENV, "").strip()
    if not text:
        return DEFAULT_CAPTURES_PER_RUN
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"{CAPTURES_PER_RUN_ENV} must be a whole number >= 1: {text!r}")
    return int(text)


def register_captures_packed(
    instance: dg.DagsterInstance,
    capture_keys: Sequence[str],
    sets: int | None = None,
    per_run: int = DEFAULT_CAPTURES_PER_RUN,
) -> list[dg.RunRequest]:
    """`register_captures`, then the run requests for them: the captures this call
    registered, per set, in runs of up to ``per_run`` contiguous partitions
    (`packed_run_request`); a capture registered before (by the demo, the CLI, an earlier
    tick whose cursor was reset) gets its own single-capture run as before, whose run key
    (the capture key) the daemon skips when it already ran.

    Two more queries, whatever the number registered: the newest row id before the insert
    and the rows after it (`dynamic_partitions_after`), which also prove the packed
    captures contiguous (a key another process registered in between splits a run).
    """
    keys = [validate_capture_key(k) for k in capture_keys]
    mark = dynamic_partitions_mark(instance)
    register_captures(instance, keys, sets)
    by_set = group_by_set(keys, sets)
    new: list[tuple[str, str]] = []
    if mark is not None:
        new = dynamic_partitions_after(instance, mark, [cs.partitions_name for cs in by_set])
    order = {key: i for i, key in enumerate(keys)}
    requests: list[tuple[int, dg.RunRequest]] = []
    for cs, members in by_set.items():
        mine = set(members)
        rows = [key for name, key in new if name == cs.partitions_name]
        packed: set[str] = set()
        for run in _contiguous(rows, mine):
            for start in range(0, len(run), per_run):
                chunk = run[start : start + per_run]
                packed.update(chunk)
                requests.append((order[chunk[0]], packed_run_request(cs, chunk)))
        for key in members:
            if key not in packed:
                requests.append((order[key], packed_run_request(cs, [key])))
    return [request for _, request in sorted(requests, key=lambda item: item[0])]


def _contiguous(rows: Sequence[str], mine: set[str]) -> list[list[str]]:
    """Maximal runs of consecutive ``rows`` (one definition's keys in registration order)
    that are all in ``mine``."""
    runs: list[list[str]] = [[]]
    for key in rows:
        if key in mine:
            runs[-1].append(key)
        elif runs[-1]:
            runs.append([])
    return [run for run in runs if run]


def packed_run_request(
    cs: CaptureSet,
    keys: Sequence[str],
    job: str = CAPTURE_JOB,
    tags: Mapping[str, str] | None = None,
) -> dg.RunRequest:
    """One run of set ``cs``'s ``job`` over ``keys`` (contiguous in the set's partitions,
    in registration order): a single-capture run for one key (run key = capture key, as
    `capture_run_request`), else a ranged run (run key ``first...last``) tagged with the
    partition range, `PACKED_TAG` and `CAPTURES_TAG`. Each capture's partitions are still
    materialized one by one (`ego_assets.defs.episodes`)."""
    if not keys:
        raise ValueError("a packed run needs at least one capture")
    job_name = cs.job_name(job)
    if len(keys) == 1:
        (key,) = keys
        one = {PARTITION_NAME_TAG: key, PARTITION_SET_TAG: f"{job_name}_partition_set"}
        return dg.RunRequest(
            run_key=key, partition_key=key, tags={**one, **(tags or {})}, job_name=job_name
        )
    first, last = keys[0], keys[-1]
    ranged = {
        ASSET_PARTITION_RANGE_START_TAG: first,
        ASSET_PARTITION_RANGE_END_TAG: last,
        PACKED_TAG: str(len(keys)),
        CAPTURES_TAG: ",".join(keys),
    }
    return dg.RunRequest(
        run_key=f"{first}...{last}", tags={**ranged, **(tags or {})}, job_name=job_name
    )


def run_captures(tags: Mapping[str, str]) -> list[str]:
    """The capture keys a capture run covers, from its tags (packed or single)."""
    if CAPTURES_TAG in tags:
        return [k for k in tags[CAPTURES_TAG].split(",") if k]
    key = tags.get(PARTITION_NAME_TAG)
    return [key] if key else []


def capture_run_request(
    capture_key: str, sets: int | None = None, job: str = CAPTURE_JOB
) -> dg.RunRequest:
    """A run of the capture's set's ``job`` (``capture_job``, ``capture_job_s001``, ...)
    over its one partition, already resolved (run key = capture key).

    The tags are the ones Dagster's own resolution adds (``dagster/partition`` and the
    job's partition set); giving them here skips the existence query per request Dagster
    would otherwise make for a key `register_captures` has just inserted.
    """
    where = partition_for_capture(capture_key, sets)
    job_name = where.capture_set.job_name(job)
    key = where.partition_key
    tags = {PARTITION_NAME_TAG: key, PARTITION_SET_TAG: f"{job_name}_partition_set"}
    return dg.RunRequest(run_key=capture_key, partition_key=key, tags=tags, job_name=job_name)


def page_captures(
    instance: dg.DagsterInstance,
    after: str | None,
    limit: int = PAGE_SIZE,
    capture_set: CaptureSet = SET0,
) -> tuple[list[str], str | None]:
    """Capture keys registered in one set, in registration order after cursor ``after``:
    one page and the cursor for the next (None when this page was the last)."""
    page = instance.get_paginated_dynamic_partitions(
        capture_set.partitions_name, limit=limit, ascending=True, cursor=after
    )
    return list(page.results), page.cursor if page.has_more else None
