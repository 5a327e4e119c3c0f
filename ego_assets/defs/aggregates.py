"""Unpartitioned aggregates over every capture, refreshed by the nightly schedule.

Each aggregate depends on a per-capture asset through `AllPartitionMapping` (it reads
every capture's output, not one partition), writes one shared artefact through the
storage resource and therefore holds `SINGLE_WRITER_POOL` (limit 1 in the deployment):
two refreshes never write the same file at once.
"""

import functools
from collections.abc import Callable

import dagster as dg

from ego_assets.defs.partitions import SET0, CaptureSet
from ego_assets.defs.pools import SINGLE_WRITER_POOL
from ego_assets.defs.resources import StorageResource

CATALOG_VERSION = "quality-catalog-1"
AGGREGATES_GROUP = "aggregates"


def aggregate_asset(
    sets: tuple[CaptureSet, ...], upstream: str, *, kind: str, code_version: str, description: str
) -> Callable[..., dg.AssetsDefinition]:
    """The ``dg.asset`` decorator of an aggregate over every partition of per-capture asset
    ``upstream`` in each of ``sets`` (group ``aggregates``, kinds python and ``kind``, the
    single-writer pool)."""
    return dg.asset(
        deps=[
            dg.AssetDep(cs.key(upstream), partition_mapping=dg.AllPartitionMapping()) for cs in sets
        ],
        group_name=AGGREGATES_GROUP,
        kinds={"python", kind},
        code_version=code_version,
        pool=SINGLE_WRITER_POOL,
        description=description,
    )


@functools.cache  # one definition per tuple of sets (the module-level one: set 0 only)
def build_quality_catalog(sets: tuple[CaptureSet, ...] = (SET0,)) -> dg.AssetsDefinition:
    """``quality_catalog`` over every set's quality_report."""

    @aggregate_asset(
        sets,
        "quality_report",
        kind="parquet",
        code_version=CATALOG_VERSION,
        description=(
            "Every episode's quality row in one Parquet table (catalog/quality/quality.parquet), "
            "columns matched by name, sorted by capture key."
        ),
    )
    def quality_catalog(storage: StorageResource) -> dg.MaterializeResult:
        # imported here: the capture code location loads this module for the group name only
        from ego_assets.quality.catalog import write_quality_catalog

        # the nightly pass over the data root also clears what killed writers left
        swept = storage.get_storage().sweep_leftovers()
        summary = write_quality_catalog(storage.get_storage())
        return dg.MaterializeResult(
            metadata={
                "uri": dg.MetadataValue.path(summary.uri),
                "episodes": summary.episodes,
                "columns": summary.columns,
                "failed_episodes": summary.failed,
                "blocked_episodes": summary.blocked,
                "waived_episodes": summary.waived,
                "leftovers_removed": len(swept),
            }
        )

    return quality_catalog


quality_catalog = build_quality_catalog()
AGGREGATES = [quality_catalog]
