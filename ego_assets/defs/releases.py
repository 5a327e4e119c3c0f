"""Dataset releases in Dagster: the ``release`` asset, one partition per release spec.

* ``releases`` (`DynamicPartitionsDefinition`): one partition per spec file
  ``<root>/releases/<name>.toml``, added by ``release_specs_sensor`` (a spec removed
  keeps its partition: its versions stay).
* ``release``: materializing partition ``name`` runs the same build as
  ``ego-assets release build NAME`` (`ego_assets.releases.build.build_release`): a new
  version when the spec or the selected episodes changed, nothing written otherwise.
  Metadata: version, episodes, bytes, whether this run wrote the version, its notes.
* `record_release`: a version built outside a run (``make demo`` builds its sample
  releases itself) recorded as the asset's step records it: the partition added when
  missing, then one materialization with the same metadata, data version (the inputs'
  hash) and code version, tagged ``ego/built_by`` (e.g. ``ego-assets-demo``); nothing
  when the partition's latest materialization already names this version and data
  version.

Its own group (``releases``), not ``aggregates``: the nightly aggregates job is
unpartitioned, and a release is cut when someone asks for one.
"""

from pathlib import Path
from typing import Any

import dagster as dg

from ego_assets.defs.episodes import DATA_VERSION_TAG, partition_materialization
from ego_assets.defs.resources import StorageResource
from ego_assets.releases.build import RELEASE_WRITER_VERSION, BuildResult, build_release
from ego_assets.releases.spec import spec_names

RELEASES_PARTITIONS_NAME = "releases"
RELEASES_GROUP = "releases"
releases_partitions = dg.DynamicPartitionsDefinition(name=RELEASES_PARTITIONS_NAME)
RELEASE_KEY = dg.AssetKey("release")
# on a materialization recorded outside a run: what built the version (``ego-assets demo``)
BUILT_BY_TAG = "ego/built_by"


def release_metadata(result: BuildResult) -> dict[str, Any]:
    """The ``release`` partition's metadata for the version ``result`` ended on: version,
    episodes, bytes (the files' sum), whether this build wrote it, path, splits, episodes
    left out, notes."""
    manifest = result.manifest
    return {
        "version": result.version,
        "episodes": len(manifest["episodes"]),
        "bytes": sum(f["bytes"] for f in manifest["files"]),
        "written": result.written,
        "path": dg.MetadataValue.path(str(result.path)),
        "splits": dg.MetadataValue.json(manifest["splits"]),
        "left_out": len(manifest["left_out"]),
        "notes": dg.MetadataValue.md("\n".join(f"- {n}" for n in manifest.get("notes", []))),
    }


@dg.asset(
    partitions_def=releases_partitions,
    deps=[dg.AssetKey("episodes")],
    group_name=RELEASES_GROUP,
    kinds={"python"},
    code_version=RELEASE_WRITER_VERSION,
    description=(
        "A dataset release (releases/<name>/v<N>/): the episodes its spec selects from the "
        "catalog, packed as WebDataset, robomimic HDF5 and LeRobot v3 (docs/releases.md)."
    ),
)
def release(context: dg.AssetExecutionContext, storage: StorageResource) -> dg.MaterializeResult:
    """Build the release named by the partition key (nothing new when nothing changed)."""
    data = storage.get_storage()
    result = build_release(
        data.root.path if data.is_local else str(data.root), context.partition_key
    )
    return dg.MaterializeResult(
        metadata=release_metadata(result),
        data_version=dg.DataVersion(result.manifest["inputs_sha256"]),
    )


def record_release(instance: dg.DagsterInstance, name: str, result: BuildResult, by: str) -> bool:
    """Record release ``name``'s version ``result``, built outside a run by ``by``, as a
    materialization of its ``release`` partition (see the module docstring); whether one
    was recorded now."""
    if not instance.has_dynamic_partition(RELEASES_PARTITIONS_NAME, name):
        instance.add_dynamic_partitions(RELEASES_PARTITIONS_NAME, [name])
    data_version = str(result.manifest["inputs_sha256"])
    latest = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=RELEASE_KEY, asset_partitions=[name]), limit=1
    ).records
    seen = latest[0].asset_materialization if latest else None
    if seen is not None and not result.written:
        version = getattr(seen.metadata.get("version"), "value", None)
        if version == result.version and (seen.tags or {}).get(DATA_VERSION_TAG) == data_version:
            return False
    event = partition_materialization(
        RELEASE_KEY,
        name,
        release_metadata(result),
        data_version,
        RELEASE_WRITER_VERSION,
        {BUILT_BY_TAG: by},
    )
    instance.report_runless_asset_event(event)
    return True


@dg.sensor(
    minimum_interval_seconds=60,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Adds a `releases` partition for every new spec file releases/<name>.toml.",
)
def release_specs_sensor(
    context: dg.SensorEvaluationContext, storage: StorageResource
) -> dg.SensorResult:
    """One `releases` partition per spec under the data root (local roots)."""
    data = storage.get_storage()
    if not data.is_local:
        return dg.SensorResult(skip_reason="release specs are read from local data roots only")
    names = spec_names(Path(data.root.path))
    have = set(context.instance.get_dynamic_partitions(RELEASES_PARTITIONS_NAME))
    new = [n for n in names if n not in have]
    if not new:
        return dg.SensorResult(skip_reason=f"no new release spec ({len(names)} known)")
    return dg.SensorResult(dynamic_partitions_requests=[releases_partitions.build_add_request(new)])
