"""The packed datasets over the per-capture exports: ``ceres_dataset``, ``egosmith_dataset``.

Both are unpartitioned aggregates (group ``aggregates``, nightly refresh, the
single-writer pool) of the catalog code location, each over every capture set's
exporter asset:

* ``ceres_dataset``: every current CERES shard merged into one LeRobotDataset v3
  (`ego_assets.exports.ceres.merge_dataset`).
* ``egosmith_dataset``: every exported EgoSmith episode packed into the final shards
  with a train/val split by episode and a SHA-256 manifest
  (`ego_assets.exports.egosmith.pack_dataset`); its run config is the EgoSmith export's
  (`export_config`), so a run packs with the options the episodes were written with.
"""

# No ``from __future__ import annotations``: Dagster reads the config annotation.

import functools

import dagster as dg

from ego_assets.defs.aggregates import aggregate_asset
from ego_assets.defs.export_assets import export_config, exporter_for
from ego_assets.defs.partitions import SET0, CaptureSet
from ego_assets.defs.resources import StorageResource
from ego_assets.exports import ceres as ceres_export
from ego_assets.exports.egosmith import EgoSmithExporter, pack_dataset
from ego_assets.exports.registry import CERES, EGOSMITH
from ego_assets.formats import egosmith_webdataset as egosmith
from ego_assets.formats.ceres_merge import MERGE_VERSION

EgoSmithConfig = export_config(EGOSMITH)


@functools.cache  # one definition per tuple of sets (the module-level one: set 0 only)
def build_ceres_dataset(sets: tuple[CaptureSet, ...] = (SET0,)) -> dg.AssetsDefinition:
    """``ceres_dataset`` over every set's ceres_episode."""

    @aggregate_asset(
        sets,
        CERES.name,
        kind=CERES.storage_kind,
        code_version=MERGE_VERSION,
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


@functools.cache  # one definition per tuple of sets (the module-level one: set 0 only)
def build_egosmith_dataset(sets: tuple[CaptureSet, ...] = (SET0,)) -> dg.AssetsDefinition:
    """``egosmith_dataset`` over every set's egosmith_shards."""

    @aggregate_asset(
        sets,
        EGOSMITH.name,
        kind=EGOSMITH.storage_kind,
        code_version=egosmith.WRITER_VERSION,
        description=(
            "The EgoSmith WebDataset: every exported episode packed into shard-NNNNNN.tar "
            "(train then val, split by episode) with manifest.json (shards, samples, episodes, "
            "SHA-256)."
        ),
    )
    def egosmith_dataset(
        storage: StorageResource,
        config: EgoSmithConfig,  # type: ignore[valid-type]
    ) -> dg.MaterializeResult:
        exporter = exporter_for(EGOSMITH, dg.Config.model_dump(config))
        assert isinstance(exporter, EgoSmithExporter)
        result = pack_dataset(storage.get_storage(), exporter.options)
        manifest = result.manifest
        return dg.MaterializeResult(
            metadata={
                "uri": dg.MetadataValue.path(result.uri),
                "shards": len(manifest["shards"]),
                "samples": manifest["samples"],
                "episodes": len(manifest["episodes"]),
                "train_episodes": manifest["splits"]["train"]["episodes"],
                "val_episodes": manifest["splits"]["val"]["episodes"],
                "skipped_episodes": dg.MetadataValue.json(manifest["skipped"]),
                "reused": result.reused,
            }
        )

    return egosmith_dataset


ceres_dataset = build_ceres_dataset()
egosmith_dataset = build_egosmith_dataset()
