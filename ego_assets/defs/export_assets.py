"""Every exporter's Dagster asset, built from its registry entry: no module per format.

`build_export_asset` turns one `ExportFormat` of `ego_assets.exports.registry` into one
capture set's per-capture asset; `build_export_assets` does it for every format now
registered. What a format decides comes from its entry and its exporter class, never
from here:

* key ``name`` (``s00i/<name>`` in set ``i``), description, code version, kinds
  (``python`` and ``storage_kind``), the step pod's resources (``step_resources``);
* the run config: one field per `ExportOption` of the exporter class (``exporter_of``),
  plus ``force`` (write again even when the stored export is current);
* the partition's metadata: the exporter's ``details`` then the step's figures;
* the step's priority in a run (`priority_tags` of ``run_priority``): Dagster's executors
  start the ready step with the highest ``dagster/priority`` first, so a capture run's
  in-process steps export in `registry.run_order` (EgoSmith before CERES).

Every exporter asset depends on the set's trajectory and quality report, sits in the
set's ``exports`` group, runs `run_export` over the run's partitions (one chunk of a
backfill at most: `per_capture_asset`) with the export phases as run tags (`run_progress`)
and is declared with ``output_required=False``: a capture its gate blocks is recorded
as `ego_assets.defs.episodes` says (nothing written).
"""

# No ``from __future__ import annotations``: Dagster reads the asset functions' config
# annotation, which is a class built at run time (`export_config`).

import functools
from collections.abc import Iterator
from pathlib import PurePath
from typing import Any

import dagster as dg
from pydantic import Field, create_model
from upath import UPath

from ego_assets.defs.episodes import (
    AssetEvent,
    materialize_result,
    partition_materialization,
    per_capture_asset,
    run_each,
    step_metadata,
)
from ego_assets.defs.exports import run_progress
from ego_assets.defs.k8s import k8s_resources
from ego_assets.defs.partitions import CaptureSet
from ego_assets.defs.resources import StorageResource
from ego_assets.exports import registry
from ego_assets.exports.registry import ExportFormat
from ego_assets.exports.run import Exporter, run_export
from ego_assets.formats import camera_sample
from ego_assets.pipeline import StepResult
from ego_assets.storage import Storage

EXPORTS_GROUP = "exports"
# on a materialization written outside a run: what wrote it (the export API's inline export)
EXPORTED_BY_TAG = "ego/exported_by"
FORCE_DESCRIPTION = "write the export again even when it is current"
# The step tags of a priority: Dagster's own (the in-process and multiprocess executors
# sort ready steps by it) and the Celery executor's (which warns when only Dagster's is
# set), as an offset from its default task priority (dagster_celery: 5).
PRIORITY_TAG = "dagster/priority"
CELERY_PRIORITY_TAG = "dagster-celery/priority"
CELERY_DEFAULT_PRIORITY = 5


@functools.cache  # one class per format: the packing asset of a format shares it
def export_config(fmt: ExportFormat) -> type[dg.Config]:
    """The run config of ``fmt``'s asset: its exporter's options, then ``force``."""
    fields: dict[str, Any] = {
        option.name: (type(option.default), Field(option.default, description=option.description))
        for option in fmt.exporter_class().OPTIONS
    }
    fields["force"] = (bool, Field(False, description=FORCE_DESCRIPTION))
    name = "".join(part.title() for part in fmt.name.split("_")) + "Config"
    config: type[dg.Config] = create_model(name, __base__=dg.Config, **fields)
    config.__doc__ = f"Options of the {fmt.label} export ({fmt.name})."
    return config


def exporter_for(fmt: ExportFormat, options: dict[str, Any]) -> Exporter:
    """``fmt``'s exporter with the option values of a run's config (``force`` included)."""
    exporter: Exporter = fmt.exporter_class().from_options(options)
    return exporter


def priority_tags(priority: int) -> dict[str, str]:
    """The op tags that start a step of ``priority`` before the ready steps of a lower one
    in its run (none for 0, the default)."""
    if not priority:
        return {}
    return {
        PRIORITY_TAG: str(priority),
        CELERY_PRIORITY_TAG: str(CELERY_DEFAULT_PRIORITY + priority),
    }


def exports_share_process(context: dg.AssetExecutionContext, cs: CaptureSet) -> bool:
    """Whether another export of set ``cs`` runs in this step's process after it: the run
    executes its steps in-process and selects another export asset (a run of the whole job
    is taken to). Where not, an export leaves nothing for the others
    (`camera_sample.sharing`)."""
    if context.job_def.executor_def.name != dg.in_process_executor.name:
        return False
    selected = context.run.asset_selection
    if selected is None:
        return True
    exports = {cs.key(fmt.name) for fmt in registry.formats()}
    return bool((set(selected) & exports) - set(context.selected_asset_keys))


def _metadata_value(value: Any) -> Any:
    """A path as a Dagster path, a list or dict as JSON, anything else as it is."""
    if isinstance(value, (UPath, PurePath)):
        return dg.MetadataValue.path(str(value))
    if isinstance(value, (list, dict)):
        return dg.MetadataValue.json(value)
    return value


def _details(exporter: Exporter, storage: Storage, key: str) -> dict[str, Any]:
    return {name: _metadata_value(v) for name, v in exporter.details(storage, key).items()}


@functools.cache  # one definition per set and format
def build_export_asset(cs: CaptureSet, fmt: ExportFormat) -> dg.AssetsDefinition:
    """Set ``cs``'s asset of export format ``fmt`` (see the module docstring)."""
    config_class = export_config(fmt)

    def export(
        context: dg.AssetExecutionContext,
        config: config_class,  # type: ignore[valid-type]
        storage: StorageResource,
    ) -> Iterator[AssetEvent]:
        store = storage.get_storage()
        options = dg.Config.model_dump(config)  # the run's option values and ``force``
        exporter = exporter_for(fmt, options)
        force = bool(options["force"])
        with run_progress(context), camera_sample.sharing(exports_share_process(context, cs)):
            results = run_each(context, lambda key: run_export(store, key, exporter, force=force))
        yield from materialize_result(
            context, results, extra=lambda key: _details(exporter, store, key)
        )

    export.__name__ = export.__qualname__ = fmt.name
    cpu, memory = fmt.step_resources
    return per_capture_asset(
        cs,
        fmt.name,
        deps=[cs.key("trajectory"), cs.key("quality_report")],
        group_name=cs.group(EXPORTS_GROUP),
        kinds={"python", fmt.storage_kind},
        code_version=fmt.code_version,
        op_tags={**k8s_resources(cpu, memory), **priority_tags(fmt.run_priority)},
        output_required=False,
        description=fmt.description,
    )(export)


def export_materialization(
    asset_key: dg.AssetKey,
    exporter: Exporter,
    store: Storage,
    key: str,
    result: StepResult,
    by: str,
) -> dg.AssetMaterialization:
    """The materialization ``exporter``'s asset (``asset_key``) records for capture ``key``
    after ``result``, for an export written outside a run by ``by`` (`EXPORTED_BY_TAG`):
    the same metadata, data version and code version as the asset's step."""
    metadata = {**_details(exporter, store, key), **step_metadata(result)}
    return partition_materialization(
        asset_key,
        key,
        metadata,
        result.data_version,
        exporter.format.code_version,
        {EXPORTED_BY_TAG: by},
    )


def build_export_assets(cs: CaptureSet) -> list[dg.AssetsDefinition]:
    """Set ``cs``'s exporter assets, one per registered format, in registry order."""
    return [build_export_asset(cs, fmt) for fmt in registry.formats()]
