"""The capture code location's parts, shared by both Dagster entry points.

`ego_assets.definitions` (the capture location) builds its definitions from these, and
`ego_assets.catalog_definitions` (the catalog location) reads the same per-capture assets
for their keys and exporters' code versions, so neither entry point imports the other.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import dagster as dg

from ego_assets.defs.export_assets import build_export_assets
from ego_assets.defs.exports import build_export_jobs
from ego_assets.defs.ingest import build_raw_capture, build_trajectory
from ego_assets.defs.partitions import CaptureSet, all_sets
from ego_assets.defs.quality import build_quality_report
from ego_assets.defs.resources import StorageResource


def per_capture_assets(cs: CaptureSet) -> list[dg.AssetsDefinition]:
    """One capture set's per-capture assets, in pipeline order (exporters last)."""
    return [
        build_raw_capture(cs),
        build_trajectory(cs),
        build_quality_report(cs),
        *build_export_assets(cs),
    ]


def build_assets(
    sets: int, export_executor: dg.ExecutorDefinition | None = None
) -> tuple[list[Any], list[dg.UnresolvedAssetJobDefinition]]:
    """Every per-capture asset of a code location with ``sets`` capture sets (the
    formats registered now), and its export jobs (one ``export_<format>`` job per exporter
    and set, on ``export_executor``; None: the code location's)."""
    assets: list[Any] = [a for cs in all_sets(sets) for a in per_capture_assets(cs)]
    # One on-demand job per exporter (launched by the export API, `ego_assets.api`).
    export_jobs = [
        job
        for cs in all_sets(sets)
        for job in build_export_jobs(build_export_assets(cs), export_executor)
    ]
    return assets, export_jobs


def storage_from_env(environ: Mapping[str, str]) -> StorageResource:
    """Storage from ``EGO_DATA_DIR`` / ``EGO_LANDING_DIR`` / ``EGO_S3_ENDPOINT_URL``."""
    return StorageResource(
        root=environ.get("EGO_DATA_DIR", "data"),
        landing=environ.get("EGO_LANDING_DIR") or None,
        endpoint_url=environ.get("EGO_S3_ENDPOINT_URL") or None,
    )
