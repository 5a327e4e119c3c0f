"""Assets raw_capture and trajectory: thin wrappers over `ego_assets.pipeline`.

Built once per capture set (`ego_assets.defs.partitions.CaptureSet`); the module-level
``raw_capture`` and ``trajectory`` are set 0's.
"""

import functools
from collections.abc import Iterator

import dagster as dg

from ego_assets import pipeline
from ego_assets.defs.episodes import AssetEvent, backfill_policy, materialize_each
from ego_assets.defs.k8s import RAW_CAPTURE_TAGS, TRAJECTORY_TAGS
from ego_assets.defs.partitions import SET0, CaptureSet
from ego_assets.defs.resources import StorageResource


@functools.cache  # one definition per set (the module-level one is set 0's)
def build_raw_capture(cs: CaptureSet) -> dg.AssetsDefinition:
    """Set ``cs``'s raw_capture."""

    @dg.asset(
        key=cs.key("raw_capture"),
        partitions_def=cs.partitions_def,
        backfill_policy=backfill_policy,
        group_name=cs.group("capture"),
        kinds={"python", "files"},
        code_version="raw-2",  # 2: capture files below capture/, manifest.json beside them
        op_tags=RAW_CAPTURE_TAGS,
        description=(
            "Immutable copy of a landed capture: its files byte for byte below capture/, "
            "and beside them manifest.json (size and SHA-256 of every file)."
        ),
    )
    def raw_capture(
        context: dg.AssetExecutionContext, storage: StorageResource
    ) -> Iterator[AssetEvent]:
        store = storage.get_storage()
        yield from materialize_each(context, lambda key: pipeline.ingest_raw(store, key))

    return raw_capture


@functools.cache  # one definition per set (the module-level one is set 0's)
def build_trajectory(cs: CaptureSet) -> dg.AssetsDefinition:
    """Set ``cs``'s trajectory."""

    @dg.asset(
        key=cs.key("trajectory"),
        partitions_def=cs.partitions_def,
        backfill_policy=backfill_policy,
        deps=[cs.key("raw_capture")],
        group_name=cs.group("capture"),
        kinds={"python", "parquet"},
        code_version=pipeline.NORMALIZER_VERSION,
        op_tags=TRAJECTORY_TAGS,
        description=(
            "Canonical trajectory: one Parquet file per stream, each on its own clock, "
            "plus capture.json (conventions, annotations, media timing)."
        ),
    )
    def trajectory(
        context: dg.AssetExecutionContext, storage: StorageResource
    ) -> Iterator[AssetEvent]:
        store = storage.get_storage()
        yield from materialize_each(context, lambda key: pipeline.normalize(store, key))

    return trajectory


raw_capture = build_raw_capture(SET0)
trajectory = build_trajectory(SET0)
