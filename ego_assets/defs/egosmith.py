"""EgoSmith WebDataset assets: per-episode shards and the packed dataset.

* ``egosmith_shards`` (per capture): `run_export` with the `EgoSmithExporter` (gate,
  the capture's stable episode index, reuse, write, receipt; a blocked capture is not
  written, see `episodes`). A capture without a head camera is materialized as
  ``skipped`` with the reason in its metadata; it does not fail.
* ``egosmith_dataset`` (unpartitioned): packs every exported episode into the final
  shards with a train/val split by episode and a SHA-256 manifest; one writer at a time.
"""

import functools
import json
from collections.abc import Iterator, Sequence

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
from ego_assets.exports.egosmith import (
    EgoSmithExporter,
    dataset_path,
    pack_dataset,
    stored_episode,
)
from ego_assets.exports.registry import EGOSMITH
from ego_assets.exports.run import run_export
from ego_assets.formats import egosmith_webdataset as egosmith
from ego_assets.formats.egosmith_webdataset import MANIFEST_FILE
from ego_assets.storage import Storage

EXPORTS_GROUP = "exports"
# Decodes one video and JPEG-encodes it frame by frame: CPU bound, one frame in memory.
EGOSMITH_TAGS = k8s_resources("1", "2Gi")


class EgoSmithConfig(dg.Config):
    """Export options (`egosmith_webdataset.EgoSmithOptions`); same for both assets."""

    dataset_name: str = Field(default="", description="sample key prefix; empty: the capture's")
    shard_bytes: int = Field(default=egosmith.DEFAULT_SHARD_BYTES, description="target shard size")
    jpeg_quality: int = Field(default=egosmith.DEFAULT_JPEG_QUALITY, description="1-100")
    export_depth: bool = Field(default=False, description="write depth.npy when there is depth")
    val_fraction: float = Field(default=0.1, description="share of episodes in the val split")
    force: bool = Field(
        default=False, description="egosmith_shards: write the episode again even when current"
    )

    def options(self) -> egosmith.EgoSmithOptions:
        return egosmith.EgoSmithOptions(
            dataset_name=self.dataset_name,
            shard_bytes=self.shard_bytes,
            jpeg_quality=self.jpeg_quality,
            export_depth=self.export_depth,
            val_fraction=self.val_fraction,
        )


@functools.cache  # one definition per set (the module-level one is set 0's)
def build_egosmith_shards(cs: CaptureSet) -> dg.AssetsDefinition:
    """Set ``cs``'s egosmith_shards."""

    @dg.asset(
        key=cs.key(EGOSMITH.name),
        partitions_def=cs.partitions_def,
        backfill_policy=backfill_policy,
        deps=[cs.key("trajectory"), cs.key("quality_report")],
        group_name=cs.group(EXPORTS_GROUP),
        kinds={"python", "files"},
        code_version=EGOSMITH.code_version,
        op_tags=EGOSMITH_TAGS,
        output_required=False,
        description=EGOSMITH.description,
    )
    def egosmith_shards(
        context: dg.AssetExecutionContext, storage: StorageResource, config: EgoSmithConfig
    ) -> Iterator[AssetEvent]:
        store = storage.get_storage()
        exporter = EgoSmithExporter(config.options())

        def step(key: str) -> pipeline.StepResult:
            return run_export(store, key, exporter, force=config.force)

        with run_progress(context):
            yield from materialize_each(context, step)

    return egosmith_shards


@functools.cache  # one definition per tuple of sets (the module-level one: set 0 only)
def build_egosmith_dataset(sets: tuple[CaptureSet, ...] = (SET0,)) -> dg.AssetsDefinition:
    """``egosmith_dataset`` over every set's egosmith_shards."""

    @dg.asset(
        deps=[
            dg.AssetDep(cs.key("egosmith_shards"), partition_mapping=dg.AllPartitionMapping())
            for cs in sets
        ],
        group_name=AGGREGATES_GROUP,
        kinds={"python", "files"},
        code_version=egosmith.WRITER_VERSION,
        pool=SINGLE_WRITER_POOL,
        description=(
            "The EgoSmith WebDataset: every exported episode packed into shard-NNNNNN.tar "
            "(train then val, split by episode) with manifest.json (shards, samples, episodes, "
            "SHA-256)."
        ),
    )
    def egosmith_dataset(storage: StorageResource, config: EgoSmithConfig) -> dg.MaterializeResult:
        result = pack_dataset(storage.get_storage(), config.options())
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


egosmith_shards = build_egosmith_shards(SET0)
egosmith_dataset = build_egosmith_dataset()
EGOSMITH_ASSETS = [egosmith_shards, egosmith_dataset]


def egosmith_rows(storage: Storage, keys: Sequence[str]) -> list[tuple[str, ...]]:
    """Table rows for `make demo` beside the receipts: skipped captures, the packed dataset."""
    rows: list[tuple[str, ...]] = [("egosmith", "")]
    for key in sorted(keys):
        summary = stored_episode(storage, key)
        if summary is not None and summary.status == "skipped":
            rows.append((key, f"skipped: {summary.reason}"))
    manifest = dataset_path(storage) / MANIFEST_FILE
    if manifest.exists():
        packed = json.loads(manifest.read_text())
        splits = packed["splits"]
        rows.append(
            (
                "packed dataset",
                f"{len(packed['shards'])} shards, {packed['samples']} samples, "
                f"{splits['train']['episodes']} train / {splits['val']['episodes']} val "
                f"episodes: {dataset_path(storage).path}",
            )
        )
    else:
        rows.append(("packed dataset", "not packed yet"))
    return rows
