"""The capture code location's parts, shared by both Dagster entry points.

`ego_assets.definitions` (the capture location) builds its definitions from these, and
`ego_assets.catalog_definitions` (the catalog location) reads the same per-capture assets
for their keys and exporters' code versions, so neither entry point imports the other.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import dagster as dg

from ego_assets.defs.ceres import build_ceres_episode
from ego_assets.defs.egosmith import build_egosmith_shards
from ego_assets.defs.exports import build_export_jobs
from ego_assets.defs.holos import build_holos_hdf5
from ego_assets.defs.ingest import build_raw_capture, build_trajectory
from ego_assets.defs.partitions import CaptureSet, all_sets
from ego_assets.defs.quality import build_quality_report
from ego_assets.defs.resources import StorageResource
from ego_assets.exports import registry


def per_capture_assets(cs: CaptureSet) -> list[dg.AssetsDefinition]:
    """One capture set's per-capture assets, in pipeline order (exporters last)."""
    return [
        build_raw_capture(cs),
        build_trajectory(cs),
        build_quality_report(cs),
        build_holos_hdf5(cs),
        build_egosmith_shards(cs),
        build_ceres_episode(cs),
    ]


def _exporters(assets: list[dg.AssetsDefinition]) -> list[dg.AssetsDefinition]:
    """One set's exporter assets, in registry order."""
    by_name = {a.key.path[-1]: a for a in assets}
    return [by_name[name] for name in registry.names()]


def build_assets(sets: int) -> tuple[list[Any], list[dg.UnresolvedAssetJobDefinition]]:
    """Every per-capture asset of a code location with ``sets`` capture sets, and its
    export jobs (one ``export_<format>`` job per exporter and set)."""
    per_set = {cs: per_capture_assets(cs) for cs in all_sets(sets)}
    assets: list[Any] = [a for set_assets in per_set.values() for a in set_assets]
    # One on-demand job per exporter (launched by the export API, `ego_assets.api`).
    export_jobs = [j for a in per_set.values() for j in build_export_jobs(_exporters(a))]
    return assets, export_jobs


def storage_from_env(environ: Mapping[str, str]) -> StorageResource:
    """Storage from ``EGO_DATA_DIR`` / ``EGO_LANDING_DIR`` / ``EGO_S3_ENDPOINT_URL``."""
    return StorageResource(
        root=environ.get("EGO_DATA_DIR", "data"),
        landing=environ.get("EGO_LANDING_DIR") or None,
        endpoint_url=environ.get("EGO_S3_ENDPOINT_URL") or None,
    )
