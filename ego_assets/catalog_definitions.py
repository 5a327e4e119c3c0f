"""Dagster entry point of the catalog code location (`ego_assets_catalog` in workspace.yaml).

The unpartitioned aggregates over every capture (quality catalog, packed datasets), the
dbt catalog (`ego_assets.defs.catalog`), ``aggregates_job`` and its nightly schedule, and
the dataset releases (`ego_assets.defs.releases`: the ``release`` asset partitioned by
release name, the sensor that adds a partition per spec). They
depend on the per-capture assets of the capture code location (`ego_assets.definitions`)
by asset key; keeping dbt here keeps it out of every capture run's load.
"""

from __future__ import annotations

import os
from typing import Any

import dagster as dg

from ego_assets.defs.aggregates import build_quality_catalog
from ego_assets.defs.capture_location import build_assets, storage_from_env
from ego_assets.defs.catalog import CATALOG_RESOURCES, catalog_assets
from ego_assets.defs.datasets import build_ceres_dataset, build_egosmith_dataset
from ego_assets.defs.partitions import all_sets, configured_sets
from ego_assets.defs.releases import release, release_specs_sensor
from ego_assets.defs.resources import StorageResource
from ego_assets.defs.schedules import aggregates_job, nightly_aggregates


def build_catalog_defs(
    storage: StorageResource, sets: int, per_capture: list[Any]
) -> dg.Definitions:
    """The catalog location's definitions over ``sets`` capture sets; ``per_capture``: the
    capture location's assets (read for their keys and exporters' code versions only)."""
    capture_sets = tuple(all_sets(sets))
    aggregates: list[Any] = [
        build_quality_catalog(capture_sets),
        build_egosmith_dataset(capture_sets),
        build_ceres_dataset(capture_sets),
    ]
    # the dataset catalog stages rows from every asset above and the per-capture ones
    aggregates += catalog_assets([*per_capture, *aggregates])
    return dg.Definitions(
        assets=[*aggregates, release],
        jobs=[aggregates_job],
        schedules=[nightly_aggregates],
        sensors=[release_specs_sensor],
        resources={"storage": storage, **CATALOG_RESOURCES},
    )


@dg.definitions
def defs() -> dg.Definitions:
    """Storage and capture sets from the same environment as the capture location."""
    n = configured_sets()
    per_capture, _ = build_assets(n)
    return build_catalog_defs(storage_from_env(os.environ), n, per_capture)
