"""Operations over capture sets for the CLI: where a capture is, subset backfills, and the
migration between numbers of sets (``ego-assets where|backfill|partitions migrate``).

* `launch_backfills`: a backfill of any subset of captures stays one command: the
  captures are grouped by set and each set gets one Dagster asset backfill over its
  captures and the chosen per-capture assets; the backfill daemon splits each into
  ranged runs of `BACKFILL_CHUNK` captures (the assets' backfill policy), as for a
  backfill launched in the UI.
* `migrate`: moves the captures whose set changes between the layout a deployment has
  and ``sets`` sets, paged, without re-running anything: see `migrate`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import dagster as dg

from ego_assets.capture_sets import PER_CAPTURE_ASSETS
from ego_assets.dagster_compat import launch_asset_backfill
from ego_assets.defs.partitions import (
    PAGE_SIZE,
    CaptureSet,
    all_sets,
    group_by_set,
    page_captures,
    partition_for_capture,
)

BACKFILL_TAG = "ego/backfill"  # on every backfill `launch_backfills` makes: "cli"
MOVED_FROM_TAG = "ego/moved_from"  # on a materialization `migrate` re-reported


@dataclass(frozen=True, slots=True)
class SetBackfill:
    capture_set: CaptureSet
    backfill_id: str
    captures: int
    assets: tuple[str, ...]


def all_captures(instance: dg.DagsterInstance, sets: int | None = None) -> Iterator[str]:
    """Every registered capture, set by set, page by page."""
    for capture_set in all_sets(sets):
        after: str | None = None
        while True:
            keys, after = page_captures(instance, after, capture_set=capture_set)
            yield from keys
            if after is None:
                break


def launch_backfills(
    instance: dg.DagsterInstance,
    asset_graph: object,
    capture_keys: Iterable[str],
    assets: Sequence[str] = PER_CAPTURE_ASSETS,
    sets: int | None = None,
    title: str | None = None,
) -> list[SetBackfill]:
    """One asset backfill per capture set over ``capture_keys`` and the per-capture
    ``assets`` (names: ``trajectory``; each set's own key is used); returns them in set
    order. The captures must be registered (``has_dynamic_partition`` is not checked per
    key: the landing sensor registers every capture it sees)."""
    unknown = sorted(set(assets) - set(PER_CAPTURE_ASSETS))
    if unknown:
        raise KeyError(f"not per-capture assets: {unknown}; choose from {list(PER_CAPTURE_ASSETS)}")
    ordered = tuple(a for a in PER_CAPTURE_ASSETS if a in assets)
    launched = []
    for capture_set, keys in group_by_set(capture_keys, sets).items():
        backfill_id = launch_asset_backfill(
            instance,
            asset_graph,
            keys,
            [capture_set.key(a) for a in ordered],
            tags={BACKFILL_TAG: "cli"},
            title=title or f"{len(keys)} captures of {capture_set.partitions_name}",
        )
        launched.append(SetBackfill(capture_set, backfill_id, len(keys), ordered))
    return launched


def where(capture_key: str, sets: int | None = None) -> dict[str, object]:
    """Where a capture is in Dagster: set, partitions definition, group, asset keys, jobs."""
    place = partition_for_capture(capture_key, sets)
    cs = place.capture_set
    return {
        "capture": place.partition_key,
        "set": cs.index,
        "partitions": cs.partitions_name,
        "group": cs.group("capture") if cs.index else "capture / quality / exports",
        "assets": [cs.key(a).to_user_string() for a in PER_CAPTURE_ASSETS],
        "job": cs.job_name("capture_job"),
    }


# ------------------------------------------------------------------------- migration


@dataclass
class MigrationReport:
    """What `migrate` found (dry run) or did (``apply``)."""

    sets: int
    applied: bool
    registered: dict[int, int] = field(default_factory=dict)  # set -> captures found there
    target: dict[int, int] = field(default_factory=dict)  # set -> captures after migration
    moved: int = 0  # captures whose set changes
    reported: int = 0  # materializations re-reported under the new set's keys

    def lines(self) -> list[str]:
        out = [f"{'set':>5} {'now':>10} {'after':>10}"]
        for index in sorted(set(self.registered) | set(self.target)):
            now, after = self.registered.get(index, 0), self.target.get(index, 0)
            out.append(f"{index:>5} {now:>10} {after:>10}")
        verb = "moved" if self.applied else "to move"
        out.append(f"captures {verb}: {self.moved}")
        if self.applied:
            out.append(f"materializations re-reported: {self.reported}")
        else:
            out.append("dry run: nothing changed (--apply to migrate)")
        return out


def _latest(
    instance: dg.DagsterInstance, asset_key: dg.AssetKey, keys: Sequence[str]
) -> Mapping[str, int]:
    return instance.event_log_storage.get_latest_storage_id_by_partition(
        asset_key, dg.DagsterEventType.ASSET_MATERIALIZATION, partitions=set(keys)
    )


def _move(
    instance: dg.DagsterInstance, source: CaptureSet, target: CaptureSet, keys: Sequence[str]
) -> int:
    """Move ``keys`` from ``source`` to ``target``; returns materializations re-reported.

    Order (each step idempotent, so a crash anywhere is repaired by running again): the
    keys join the target set; each per-capture asset's latest materialization is
    re-reported under the target's key unless the target already has one at least as
    recent (a repeated move copies nothing twice); the keys leave the source set last.
    The source asset's events stay in the event log as history (Dagster's OSS storage
    cannot wipe single partitions), but a partition no longer in its definition is not
    shown, counted or walked anywhere (UI, backfills, sensors).
    """
    instance.add_dynamic_partitions(target.partitions_name, list(keys))
    reported = 0
    for name in PER_CAPTURE_ASSETS:
        old_key, new_key = source.key(name), target.key(name)
        old = _latest(instance, old_key, keys)
        if not old:
            continue
        new = _latest(instance, new_key, list(old))
        copy = {k: sid for k, sid in old.items() if new.get(k, -1) < sid}
        if copy:
            records = instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=old_key, storage_ids=list(copy.values())),
                limit=len(copy),
            ).records
            for record in sorted(records, key=lambda r: r.storage_id):
                mat = record.asset_materialization
                if mat is None:
                    continue
                instance.report_runless_asset_event(
                    dg.AssetMaterialization(
                        asset_key=new_key,
                        partition=mat.partition,
                        description=mat.description,
                        metadata=mat.metadata,
                        tags={**(mat.tags or {}), MOVED_FROM_TAG: old_key.to_user_string()},
                    )
                )
                reported += 1
    for key in keys:
        instance.delete_dynamic_partition(source.partitions_name, key)
    return reported


def migrate(
    instance: dg.DagsterInstance,
    sets: int,
    current_sets: int,
    apply: bool = False,
    page_size: int = PAGE_SIZE,
    progress: Callable[[str], None] | None = None,
) -> MigrationReport:
    """Put every registered capture in its set among ``sets`` sets.

    Walks the partitions of sets ``0 .. max(sets, current_sets) - 1`` page by page
    (memory: one page), so captures left in a higher set by an interrupted migration or by
    a deployment with more sets are found too. Dry run: counts per set now and after.
    With ``apply``: each page's captures whose set changes are moved (`_move`): nothing
    is re-run, files stay where they are (storage paths do not depend on the set), and
    the stale-code sensor sees no code change. Safe to run again after a crash: a
    finished capture is in its target set only and is skipped.
    """
    report = MigrationReport(sets=sets, applied=apply)
    sources = all_sets(max(sets, current_sets))
    # counts first (a dry pass), so captures moved into a later set are not counted twice
    for source in sources:
        for keys in _pages(instance, source, page_size):
            report.registered[source.index] = report.registered.get(source.index, 0) + len(keys)
            for target, members in group_by_set(keys, sets).items():
                report.target[target.index] = report.target.get(target.index, 0) + len(members)
                if target != source:
                    report.moved += len(members)
    if not apply:
        return report
    for source in sources:
        # the cursor is the partition row's id: rows deleted behind it do not shift pages
        for keys in _pages(instance, source, page_size):
            for target, members in group_by_set(keys, sets).items():
                if target != source:
                    report.reported += _move(instance, source, target, members)
                    if progress:
                        progress(
                            f"{len(members)} captures {source.partitions_name} -> "
                            f"{target.partitions_name}"
                        )
    return report


def _pages(
    instance: dg.DagsterInstance, capture_set: CaptureSet, page_size: int
) -> Iterator[list[str]]:
    after: str | None = None
    while True:
        keys, after = page_captures(instance, after, page_size, capture_set=capture_set)
        if keys:
            yield keys
        if after is None:
            return


# ------------------------------------------------------------------------ CLI entries


def asset_graph(sets: int) -> object:
    """The code location's asset graph with ``sets`` capture sets (what backfills target)."""
    from ego_assets.definitions import build_defs
    from ego_assets.defs.resources import StorageResource

    with dg.instance_for_test():  # resolving reads definitions state; keep it off the real one
        return build_defs(StorageResource(root="unused"), sets=sets).resolve_asset_graph()


def backfill_command(
    instance: dg.DagsterInstance,
    capture_keys: Sequence[str] | None,
    assets: Sequence[str],
    sets: int | None,
    out: Callable[[str], None],
) -> int:
    """``ego-assets backfill``: one backfill per set on ``instance``."""
    from ego_assets.defs.partitions import resolve_sets

    n = resolve_sets(sets)
    graph = asset_graph(n)
    keys = list(capture_keys) if capture_keys is not None else all_captures(instance, n)
    started = time.monotonic()
    launched = launch_backfills(instance, graph, keys, assets, n)
    elapsed = time.monotonic() - started
    for b in launched:
        out(f"{b.backfill_id}  {b.capture_set.partitions_name:<14} {b.captures:>8} captures")
    total = sum(b.captures for b in launched)
    assets_text = ", ".join(launched[0].assets) if launched else "-"
    out(f"{len(launched)} backfills, {total} captures, {assets_text} ({elapsed:.1f} s)")
    return 0


def migrate_command(
    instance: dg.DagsterInstance,
    sets: int,
    current_sets: int | None,
    apply: bool,
    out: Callable[[str], None],
) -> int:
    """``ego-assets partitions migrate`` on ``instance``."""
    from ego_assets.defs.partitions import resolve_sets

    report = migrate(instance, sets, resolve_sets(current_sets), apply=apply, progress=out)
    for line in report.lines():
        out(line)
    return 0
