"""On-demand exports (what `ego_assets.api` launches): one asset job per export format,
the capture -> (asset, partition) mapping, and the exporters' progress as run tags.

* ``export_<format>`` jobs select the exporter asset and its per-capture upstream
  (raw copy, trajectory, quality report), and run their steps in the run worker's
  process (unless ``EGO_EXECUTOR`` names an executor): one capture's export pays no
  process per step. Those steps reuse their stored results when the
  capture is unchanged (content hashes); after an edited capture they bring the
  trajectory and gate up to date first. When the API finds the capture's gate current
  (made from the raw copy and code there are now, and recorded in Dagster) it launches
  the job with the exporter asset alone, and the run does the export only.
  Runs carry ``ego/export=<format>`` and the partition tag, which is how the API finds
  them again: it stores nothing of its own.
* `export_target` is the one place that says which asset and partition an export of a
  capture is: every caller (the API, its page, the bench) goes through it.
* `run_progress`: while an exporter step runs on a single capture, every export phase it
  reports (`ego_assets.progress`: read, write, upload) becomes the run's ``ego/progress``
  (0-1) and ``ego/phase`` tags, written at most every `PROGRESS_INTERVAL_S` seconds, at
  each phase change and at each phase's end. The UI shows them with the run; the API
  reads them with the run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import dagster as dg

from ego_assets.defs.partitions import partition_for_capture, set_of_partitions_def
from ego_assets.exports import registry
from ego_assets.progress import export_fraction, listening

log = logging.getLogger(__name__)

EXPORT_TAG = "ego/export"
PROGRESS_TAG = "ego/progress"
PHASE_TAG = "ego/phase"
PARTITION_TAG = "dagster/partition"
PROGRESS_INTERVAL_S = 0.5
GATE_ASSET = "quality_report"


@dataclass(frozen=True, slots=True)
class ExportTarget:
    """Where the export ``format`` of one capture lives in Dagster."""

    capture_id: str
    format: str  # exporter asset name, also the receipts' format
    asset_key: dg.AssetKey
    partition_key: str
    job_name: str
    gate_key: dg.AssetKey  # the capture set's quality_report (the gate the export reads)

    def run_config(self, config: dict[str, Any]) -> dict[str, Any]:
        """The run config giving the exporter step ``config`` (its options and ``force``).

        The step is named after the asset key (``holos_hdf5`` in set 0,
        ``s001__holos_hdf5`` in set 1), not after the format."""
        return {"ops": {self.asset_key.to_python_identifier(): {"config": config}}}


def export_job_name(export_format: str) -> str:
    return f"export_{export_format}"


def export_target(capture_id: str, export_format: str, sets: int | None = None) -> ExportTarget:
    """The asset, partition and job of ``capture_id``'s export in ``export_format``.

    One capture is one partition (key = capture id) of its capture set's exporter asset
    (`partition_for_capture`; ``sets`` defaults to ``EGO_CAPTURE_SETS``). Raises
    `CaptureKeyError` for an id that breaks the key rule, KeyError for a format that has
    no exporter (`ego_assets.exports.registry`).
    """
    registry.by_name(export_format)
    where = partition_for_capture(capture_id, sets)
    return ExportTarget(
        capture_id=where.partition_key,
        format=export_format,
        asset_key=where.capture_set.key(export_format),
        partition_key=where.partition_key,
        job_name=where.capture_set.job_name(export_job_name(export_format)),
        gate_key=where.capture_set.key(GATE_ASSET),
    )


def build_export_jobs(
    exporters: list[dg.AssetsDefinition], executor_def: dg.ExecutorDefinition | None = None
) -> list[dg.UnresolvedAssetJobDefinition]:
    """One ``export_<format>`` job per exporter asset (the asset plus its upstream), named
    after the asset's capture set (``export_holos_hdf5_s001``), on ``executor_def`` (None:
    the code location's; `build_defs` passes the in-process executor unless
    ``EGO_EXECUTOR`` names one, as for ``capture_job``)."""
    jobs = []
    for asset in exporters:
        partitions_def = asset.partitions_def
        assert isinstance(partitions_def, dg.DynamicPartitionsDefinition) and partitions_def.name
        capture_set = set_of_partitions_def(partitions_def.name)
        assert capture_set is not None, f"{asset.key} is not in a capture set"
        export_format = asset.key.path[-1]
        jobs.append(
            dg.define_asset_job(
                capture_set.job_name(export_job_name(export_format)),
                selection=dg.AssetSelection.assets(asset).upstream(),
                partitions_def=partitions_def,
                executor_def=executor_def,
                tags={EXPORT_TAG: export_format},
                description=(
                    f"One capture's {export_format} export on demand (the export API): the "
                    "exporter and its per-capture inputs, reused when unchanged."
                ),
            )
        )
    return jobs


@contextmanager
def run_progress(context: dg.AssetExecutionContext) -> Iterator[None]:
    """Export phases reported inside the block -> the run's progress tags (single capture)."""
    if context.has_partition_key_range:
        yield
        return
    instance, run_id = context.instance, context.run_id
    last_at, last_phase = [0.0], [""]

    def listener(task: str, done: int, total: int) -> None:
        fraction = export_fraction(task, done, total)
        if fraction is None:
            return
        now = time.monotonic()
        recent = now - last_at[0] < PROGRESS_INTERVAL_S
        if task == last_phase[0] and recent and done < total:
            return
        last_at[0], last_phase[0] = now, task
        try:
            instance.add_run_tags(run_id, {PROGRESS_TAG: f"{fraction:.3f}", PHASE_TAG: task})
        except Exception as exc:  # progress is advisory: never fail an export for it
            log.warning("run %s: progress not recorded: %s", run_id, exc)

    with listening(listener):
        yield


def exporter_code_versions() -> dict[str, str]:
    """Each exporter's code version now (a receipt with another one is stale)."""
    return {fmt.name: fmt.code_version for fmt in registry.formats()}
