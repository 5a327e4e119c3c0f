"""Import sensors: configured dataset sources landed incrementally, one page per tick.

``EGO_IMPORT_SOURCES`` lists the sources, one ``KIND=SRC`` per line or separated by
``;`` (``SRC``: a folder or ``s3://bucket/prefix``, read with the storage's S3 options),
e.g. ``egodex=s3://datasets/egodex/train``. Each gets a sensor ``import_<kind>[_<n>]``
that, per tick, lands at most `MAX_LANDED_PER_TICK` episodes and looks at no more than
`MAX_EXAMINED_PER_TICK` (`ego_assets.importers.core.import_source`). Its cursor is the
last episode examined: the next tick lists the source from there in pages of 1,000
names (S3 ``StartAfter``), so no tick lists the whole source. The landed captures are
then picked up by ``landing_sensor`` like any upload. Failed episodes are logged with
their error (dataset, episode, file, field) and passed over; ``ego-assets import``
retries them, and resetting the cursor rescans the source (landed ones are skipped).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import dagster as dg

from ego_assets.defs.resources import StorageResource
from ego_assets.importers import IMPORTERS, get_importer
from ego_assets.importers.core import import_source, open_source

SOURCES_ENV = "EGO_IMPORT_SOURCES"
MAX_LANDED_PER_TICK = 20  # an EgoDex episode lands in ~0.1-1 s: ticks stay far below 60 s
MAX_EXAMINED_PER_TICK = 2000  # already-landed episodes cost two existence checks each
DEFAULT_IMPORT_INTERVAL_S = 30


@dataclass(frozen=True, slots=True)
class ImportSource:
    """One configured source: its importer kind, location and sensor name."""

    kind: str
    src: str
    name: str


def parse_import_sources(text: str) -> tuple[ImportSource, ...]:
    """The sources of ``EGO_IMPORT_SOURCES`` (see the module docstring).

    Raises:
        ValueError: an entry that is not ``KIND=SRC`` or names an unknown kind.
    """
    entries = [e.strip() for line in text.splitlines() for e in line.split(";") if e.strip()]
    out: list[ImportSource] = []
    for entry in entries:
        kind, sep, src = (part.strip() for part in entry.partition("="))
        if not sep or not kind or not src:
            raise ValueError(f"{SOURCES_ENV}: entry {entry!r} is not KIND=SRC")
        if kind not in IMPORTERS:
            raise ValueError(
                f"{SOURCES_ENV}: unknown kind {kind!r}; kinds: {', '.join(sorted(IMPORTERS))}"
            )
        n = sum(1 for s in out if s.kind == kind)
        name = f"import_{kind.replace('-', '_')}" + (f"_{n + 1}" if n else "")
        out.append(ImportSource(kind, src, name))
    return tuple(out)


def import_sources_from_env(environ: Mapping[str, str]) -> tuple[ImportSource, ...]:
    return parse_import_sources(environ.get(SOURCES_ENV, ""))


def build_import_sensor(
    source: ImportSource, interval_s: int = DEFAULT_IMPORT_INTERVAL_S
) -> dg.SensorDefinition:
    """The sensor landing ``source`` incrementally (see the module docstring)."""
    return dg.sensor(
        name=source.name,
        minimum_interval_seconds=interval_s,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=(
            f"Imports {source.kind} episodes from {source.src} into the landing zone, "
            f"at most {MAX_LANDED_PER_TICK} per tick, resuming after its cursor (the last "
            "episode examined); landing_sensor then runs them. Reset the cursor to rescan."
        ),
    )(_tick_over(source))


def _tick_over(source: ImportSource) -> Callable[..., dg.SkipReason]:
    def import_tick(context: dg.SensorEvaluationContext, storage: StorageResource) -> dg.SkipReason:
        return _import_tick(context, storage, source)

    return import_tick


def _import_tick(
    context: dg.SensorEvaluationContext, storage: StorageResource, source: ImportSource
) -> dg.SkipReason:
    after = json.loads(context.cursor)["after"] if context.cursor else ""
    importer = get_importer(source.kind)
    opened = open_source(source.src, importer, storage_options=storage.storage_options())
    summary = import_source(
        storage.get_storage(),
        importer,
        opened,
        after=after,
        limit=MAX_LANDED_PER_TICK,
        examine=MAX_EXAMINED_PER_TICK,
    )
    for error in summary.failed:
        context.log.warning(f"import failed: {error}")
    if summary.last != after:
        context.update_cursor(json.dumps({"after": summary.last}))
    return dg.SkipReason(
        f"{source.kind} from {source.src}: {len(summary.landed)} landed, "
        f"{len(summary.skipped)} already there, {len(summary.failed)} failed; "
        f"next after {summary.last!r}"
    )
