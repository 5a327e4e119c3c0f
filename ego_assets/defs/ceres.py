"""CERES LeRobot v3 export: ``ceres_episode`` (one shard per capture) and ``ceres_dataset``.

Thin wrappers over `ego_assets.exports.ceres`: each capture of a run goes through
`run_export` (gate, episode index, reuse, write, receipt); a blocked capture gets no
shard and is recorded as blocked (see `episodes`).
``ceres_dataset`` merges every current shard into one dataset; it belongs to the
``aggregates`` group (nightly refresh) and holds the single-writer pool.
"""

import functools
from collections.abc import Iterator

import dagster as dg
from pydantic import Field

from ego_assets import pipeline
from ego_assets.defs.aggregates import AGGREGATES_GROUP
from ego_assets.defs.episodes import AssetEvent, backfill_policy, materialize_each
from ego_assets.defs.exports import run_progress
from ego_assets.defs.k8s import k8s_resources
from ego_assets.defs.partitions import SET0, CaptureSet
from ego_assets.defs.pools import SINGLE_WRITER_POOL
from ego_assets.defs.resources import StorageResource
from ego_assets.exports import ceres as ceres_export
from ego_assets.exports.registry import CERES
from ego_assets.exports.run import run_export
from ego_assets.formats.ceres_merge import MERGE_VERSION

# Decodes/encodes one camera stream and holds one episode's rows (410 floats per frame).
CERES_TAGS = k8s_resources("1", "3Gi")


class CeresConfig(dg.Config):
    """Options of the per-episode CERES export."""

    force: bool = Field(default=False, description="write the shard again even when current")


@functools.cache  # one definition per set (the module-level one is set 0's)
def build_ceres_episode(cs: CaptureSet) -> dg.AssetsDefinition:
    """Set ``cs``'s ceres_episode."""

    @dg.asset(
        key=cs.key(CERES.name),
        partitions_def=cs.partitions_def,
        backfill_policy=backfill_policy,
        deps=[cs.key("trajectory"), cs.key("quality_report")],
        group_name=cs.group("exports"),
        kinds={"python", "parquet"},
        code_version=CERES.code_version,
        op_tags=CERES_TAGS,
        output_required=False,
        description=CERES.description,
    )
    def ceres_episode(
        context: dg.AssetExecutionContext, storage: StorageResource, config: CeresConfig
    ) -> Iterator[AssetEvent]:
        store = storage.get_storage()
        exporter = ceres_export.CeresExporter()

        def step(key: str) -> pipeline.StepResult:
            return run_export(store, key, exporter, force=config.force)

        with run_progress(context):
            yield from materialize_each(context, step)

    return ceres_episode


@functools.cache  # one definition per tuple of sets (the module-level one: set 0 only)
def build_ceres_dataset(sets: tuple[CaptureSet, ...] = (SET0,)) -> dg.AssetsDefinition:
    """``ceres_dataset`` over every set's ceres_episode."""

    @dg.asset(
        deps=[
            dg.AssetDep(cs.key("ceres_episode"), partition_mapping=dg.AllPartitionMapping())
            for cs in sets
        ],
        group_name=AGGREGATES_GROUP,
        kinds={"python", "parquet"},
        code_version=MERGE_VERSION,
        pool=SINGLE_WRITER_POOL,
        description=(
            "Every current CERES shard merged into one LeRobotDataset v3 "
            "(exports/ceres-lerobot-v3-dataset/), episodes in index order."
        ),
    )
    def ceres_dataset(storage: StorageResource) -> dg.MaterializeResult:
        summary = ceres_export.merge_dataset(storage.get_storage())
        return dg.MaterializeResult(
            metadata={
                "uri": dg.MetadataValue.path(summary.uri),
                "episodes": summary.episodes,
                "frames": summary.frames,
                "tasks": summary.tasks,
                "excluded": dg.MetadataValue.json(summary.excluded),
                "reused": summary.reused,
            }
        )

    return ceres_dataset


ceres_episode = build_ceres_episode(SET0)
ceres_dataset = build_ceres_dataset()
CERES_ASSETS = [ceres_episode, ceres_dataset]
