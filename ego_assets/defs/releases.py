"""Dataset releases in Dagster: the ``release`` asset, one partition per release spec.

* ``releases`` (`DynamicPartitionsDefinition`): one partition per spec file
  ``<root>/releases/<name>.toml``, added by ``release_specs_sensor`` (a spec removed
  keeps its partition: its versions stay).
* ``release``: materializing partition ``name`` runs the same build as
  ``ego-assets release build NAME`` (`ego_assets.releases.build.build_release`): a new
  version when the spec or the selected episodes changed, nothing written otherwise.
  Metadata: version, episodes, bytes, whether this run wrote the version, its notes.

Its own group (``releases``), not ``aggregates``: the nightly aggregates job is
unpartitioned, and a release is cut when someone asks for one.
"""

from pathlib import Path

import dagster as dg

from ego_assets.defs.resources import StorageResource
from ego_assets.releases.build import RELEASE_WRITER_VERSION, build_release
from ego_assets.releases.spec import spec_names

RELEASES_PARTITIONS_NAME = "releases"
RELEASES_GROUP = "releases"
releases_partitions = dg.DynamicPartitionsDefinition(name=RELEASES_PARTITIONS_NAME)


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
    manifest = result.manifest
    return dg.MaterializeResult(
        metadata={
            "version": result.version,
            "episodes": len(manifest["episodes"]),
            "bytes": sum(f["bytes"] for f in manifest["files"]),
            "written": result.written,
            "path": dg.MetadataValue.path(str(result.path)),
            "splits": dg.MetadataValue.json(manifest["splits"]),
            "left_out": len(manifest["left_out"]),
            "notes": dg.MetadataValue.md("\n".join(f"- {n}" for n in manifest.get("notes", []))),
        },
        data_version=dg.DataVersion(manifest["inputs_sha256"]),
    )


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
