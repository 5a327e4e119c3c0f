"""Asset holos_hdf5: one Holos HDF5 file per episode (`run_export` with the `HolosExporter`).

Every episode is checked against its quality gate first (in `run_export`): nothing is
written for a blocked one (its
partition stays missing in a single-capture run, ``export: blocked`` with the reasons in a
backfill chunk, see `ego_assets.defs.episodes`). The export notes (what was skipped, what
was embedded verbatim) are the partition's metadata and a JSON sidecar beside the file.
"""

import functools
from collections.abc import Iterator
from typing import Any

import dagster as dg
from pydantic import Field

from ego_assets.defs.egosmith import EXPORTS_GROUP
from ego_assets.defs.episodes import AssetEvent, backfill_policy, materialize_result, run_each
from ego_assets.defs.exports import run_progress
from ego_assets.defs.k8s import k8s_resources
from ego_assets.defs.partitions import SET0, CaptureSet
from ego_assets.defs.resources import StorageResource
from ego_assets.exports import holos as holos_export
from ego_assets.exports.registry import HOLOS
from ego_assets.exports.run import run_export
from ego_assets.storage import Storage

# One trajectory in memory plus the resampled demo (~2x a 10-minute capture's hands).
HOLOS_TAGS = k8s_resources("1", "4Gi")


class HolosConfig(dg.Config):
    """Options of the Holos HDF5 export."""

    decode_frames: bool = Field(
        default=False,
        description="also write decoded video frames (uint8, one per chunk) and frame indices",
    )
    force: bool = Field(default=False, description="write the file again even when current")


def _metadata(store: Storage, key: str) -> dict[str, Any]:
    notes = holos_export.stored_notes(store, key) or {}
    return {
        "file": dg.MetadataValue.path(
            str(holos_export.export_dir(store, key) / holos_export.file_name(key))
        ),
        "skipped_items": dg.MetadataValue.json(notes.get("skipped", [])),
        "embedded_files": dg.MetadataValue.json(notes.get("extras", [])),
    }


@functools.cache  # one definition per set (the module-level one is set 0's)
def build_holos_hdf5(cs: CaptureSet) -> dg.AssetsDefinition:
    """Set ``cs``'s holos_hdf5."""

    @dg.asset(
        key=cs.key(HOLOS.name),
        partitions_def=cs.partitions_def,
        backfill_policy=backfill_policy,
        deps=[cs.key("trajectory"), cs.key("quality_report")],
        group_name=cs.group(EXPORTS_GROUP),
        kinds={"python", "hdf5"},
        code_version=HOLOS.code_version,
        op_tags=HOLOS_TAGS,
        output_required=False,
        description=HOLOS.description,
    )
    def holos_hdf5(
        context: dg.AssetExecutionContext, config: HolosConfig, storage: StorageResource
    ) -> Iterator[AssetEvent]:
        store = storage.get_storage()
        exporter = holos_export.HolosExporter(decode_frames=config.decode_frames)
        with run_progress(context):
            results = run_each(
                context, lambda key: run_export(store, key, exporter, force=config.force)
            )
        yield from materialize_result(context, results, extra=lambda key: _metadata(store, key))

    return holos_hdf5


holos_hdf5 = build_holos_hdf5(SET0)
