"""Assets raw_capture and trajectory: thin wrappers over `ego_assets.pipeline`.

Built once per capture set (`ego_assets.defs.partitions.CaptureSet`); the module-level
``raw_capture`` and ``trajectory`` are set 0's.
"""

import functools
from collections.abc import Callable, Iterator
from typing import Any

import dagster as dg

from ego_assets import pipeline
from ego_assets.defs.episodes import AssetEvent, materialize_each, per_capture_asset
from ego_assets.defs.k8s import RAW_CAPTURE_TAGS, TRAJECTORY_TAGS
from ego_assets.defs.partitions import SET0, CaptureSet
from ego_assets.defs.resources import StorageResource
from ego_assets.storage import Storage


def _pipeline_asset(
    cs: CaptureSet,
    name: str,
    step: Callable[[Storage, str], pipeline.StepResult],
    **asset_args: Any,
) -> dg.AssetsDefinition:
    """Set ``cs``'s capture-group asset ``name``: ``step(storage, key)`` for every capture
    of the run (`materialize_each`)."""

    def asset(context: dg.AssetExecutionContext, storage: StorageResource) -> Iterator[AssetEvent]:
        store = storage.get_storage()
        yield from materialize_each(context, lambda key: step(store, key))

    asset.__name__ = asset.__qualname__ = name  # the op's name
    return per_capture_asset(cs, name, group_name=cs.group("capture"), **asset_args)(asset)


@functools.cache  # one definition per set (the module-level one is set 0's)
def build_raw_capture(cs: CaptureSet) -> dg.AssetsDefinition:
    """Set ``cs``'s raw_capture."""
    return _pipeline_asset(
        cs,
        "raw_capture",
        pipeline.ingest_raw,
        kinds={"python", "files"},
        code_version="raw-2",  # 2: capture files below capture/, manifest.json beside them
        op_tags=RAW_CAPTURE_TAGS,
        description=(
            "Immutable copy of a landed capture: its files byte for byte below capture/, "
            "and beside them manifest.json (size and SHA-256 of every file)."
        ),
    )


@functools.cache  # one definition per set (the module-level one is set 0's)
def build_trajectory(cs: CaptureSet) -> dg.AssetsDefinition:
    """Set ``cs``'s trajectory."""
    return _pipeline_asset(
        cs,
        "trajectory",
        pipeline.normalize,
        deps=[cs.key("raw_capture")],
        kinds={"python", "parquet"},
        code_version=pipeline.TRAJECTORY_CODE_VERSION,
        op_tags=TRAJECTORY_TAGS,
        description=(
            "Canonical trajectory: every stream, each on its own clock, in one Parquet "
            "file (streams.parquet), plus capture.json (conventions, annotations, media "
            "timing)."
        ),
    )


raw_capture = build_raw_capture(SET0)
trajectory = build_trajectory(SET0)
