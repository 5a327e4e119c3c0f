"""The export formats, one entry each: the only place an exporter's identity is spelled.

Every caller iterates `formats()` (or looks an entry up by name, route or policy key)
at call time: the Dagster assets, checks and jobs, the capture sets' asset list, the
API routes and the page's columns, the export policy, the catalog's receipts, staging
and coverage, the demo's tables and the CLI. Whatever runs a capture's exports one after
another in one process takes them in `run_order` (EgoSmith before CERES: see
`ExportFormat.run_priority`). Adding a format is one writer module plus one entry in
`FORMATS` (``docs/architecture.md``).

An entry names the format five ways, each for one audience:

=================  ====================  =============================================
field              example               used by
=================  ====================  =============================================
``name``           ``holos_hdf5``        the Dagster asset (set 0's key; set ``i``'s is
                                         ``s00i/<name>``), the receipts' ``format``
                                         and folder, the catalog's tables and columns
``route``          ``export-hdf5``       the API: ``/captures/<key>/<route>``
``label``          ``HDF5``              the page's column and button
``policy_key``     ``robomimic``         ``quality/policy.toml`` and the gate
``folder``         ``holos_hdf5``        ``exports/<folder>/<key>/`` below the data root
=================  ====================  =============================================

No Dagster, no storage and no writer is imported here: an entry names where its code
version and its exporter are defined (``version_of``, ``exporter_of``:
``"module:ATTRIBUTE"``) and `ExportFormat.code_version` / `ExportFormat.exporter_class`
import that module on first use, so the CLI, the policy and the API start without
loading h5py, PyAV or pandas. The Dagster layer builds each format's asset from its
entry (`ego_assets.defs.export_assets`): key, kinds, step resources, and the Dagster
config from the exporter class's `ExportOption`s.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

RECEIPT_LAYOUTS = ("file", "folder")


@dataclass(frozen=True, slots=True)
class ExportOption:
    """One option of an exporter (a field of its Dagster asset's run config).

    Attributes:
        name: the config field and the keyword the exporter class reads.
        default: the value when a run does not set it; its type (bool, int, float or
            str) is the field's type.
        description: one line for the Dagster launchpad.
    """

    name: str
    default: bool | int | float | str
    description: str


def _attribute(where: str) -> Any:
    """The attribute named by ``"module:ATTRIBUTE"`` (its module imported on first use)."""
    module, _, attribute = where.partition(":")
    return getattr(importlib.import_module(module), attribute)


@dataclass(frozen=True, slots=True)
class ExportFormat:
    """One export format (see the module docstring for the names).

    Attributes:
        name: exporter asset name and the receipts' ``format``.
        route: the API's route segment.
        label: display name (page column, button).
        policy_key: the export's name in the export policy.
        version_of: ``"module:ATTRIBUTE"`` holding the writer's code version
            (`code_version`).
        exporter_of: ``"module:CLASS"`` of the format's exporter
            (`ego_assets.exports.run.Exporter`; `exporter_class`).
        folder: ``exports/<folder>/<capture key>/`` holds one capture's export.
        receipt_layout: ``file`` (the receipt's ``path`` is one file, digested whole)
            or ``folder`` (a folder, digested by `catalog.receipts.folder_digest`).
        receipt_path: the receipt's ``path`` below the data root, with ``{key}`` and
            ``{index}`` (the episode index) to fill in.
        needs: what the writer needs from the canonical trajectory.
        options: export options the API passes through besides ``force`` (booleans).
        description: one line for the Dagster asset and the docs.
        storage_kind: what the export is stored as (a Dagster kind beside ``python``).
        step_resources: CPU and memory (Kubernetes quantities) one export step of a
            chunk of 10-minute episodes needs; the step's pod requests them.
        run_priority: where a capture's exports run one after another in one process
            (`run_order`: the landing sensor's inline path, a capture run's in-process
            steps), higher runs first; the display order stays `FORMATS`'.
    """

    name: str
    route: str
    label: str
    policy_key: str
    version_of: str
    exporter_of: str
    folder: str
    receipt_layout: str
    receipt_path: str
    needs: str
    options: tuple[str, ...] = ()
    description: str = ""
    storage_kind: str = "files"
    step_resources: tuple[str, str] = ("1", "2Gi")
    run_priority: int = 0

    def __post_init__(self) -> None:
        if self.receipt_layout not in RECEIPT_LAYOUTS:
            raise ValueError(f"export format {self.name}: receipt_layout must be {RECEIPT_LAYOUTS}")
        if not self.route.startswith("export-"):
            raise ValueError(f"export format {self.name}: route must start with 'export-'")

    @property
    def code_version(self) -> str:
        """The writer's code version: the asset's Dagster code version and the receipts'
        ``code_version`` (bumped exactly when the bytes for an unchanged input change)."""
        return str(_attribute(self.version_of))

    def exporter_class(self) -> Any:
        """The exporter class (``exporter_of``): ``exporter_class().from_options(values)``
        builds an exporter from its `ExportOption` values."""
        return _attribute(self.exporter_of)


HOLOS = ExportFormat(
    name="holos_hdf5",
    route="export-hdf5",
    label="HDF5",
    policy_key="robomimic",
    version_of="ego_assets.formats.holos_writer:EXPORTER_VERSION",
    exporter_of="ego_assets.exports.holos:HolosExporter",
    folder="holos_hdf5",
    receipt_layout="file",
    receipt_path="exports/holos_hdf5/{key}/{key}.h5",
    needs="any streams (each written when present); the raw files are embedded",
    options=("decode_frames",),
    description=(
        "Holos HDF5 (HolosCapture-1.0): one self-contained .h5 per episode in robomimic's "
        "layout with CF-1.11 attributes, every raw stream and the media embedded."
    ),
    storage_kind="hdf5",
    # One trajectory in memory plus the resampled demo (~2x a 10-minute capture's hands).
    step_resources=("1", "4Gi"),
)
CERES = ExportFormat(
    name="ceres_episode",
    route="export-lerobot",
    label="LeRobot",
    policy_key="lerobot",
    version_of="ego_assets.formats.ceres_lerobot:CODE_VERSION",
    exporter_of="ego_assets.exports.ceres:CeresExporter",
    folder="ceres-lerobot-v3",
    receipt_layout="folder",
    receipt_path="exports/ceres-lerobot-v3/{key}/shards/episode-{index:06d}",
    needs="a camera, head or hand stream at a known rate; the outward camera's video",
    description=(
        "CERES LeRobotDataset v3 shard of the episode (exports/ceres-lerobot-v3/<key>/"
        "shards/episode-<index>/): data, meta, outward-camera mp4, CERES sidecars, receipt."
    ),
    storage_kind="parquet",
    # Decodes/encodes one camera stream and holds one episode's rows (410 floats per frame).
    step_resources=("1", "3Gi"),
)
EGOSMITH = ExportFormat(
    name="egosmith_shards",
    route="export-webdataset",
    label="WebDataset",
    policy_key="webdataset",
    version_of="ego_assets.formats.egosmith_webdataset:WRITER_VERSION",
    exporter_of="ego_assets.exports.egosmith:EgoSmithExporter",
    folder="egosmith",
    receipt_layout="folder",
    receipt_path="exports/egosmith/{key}",
    needs="a head camera with its video (without one the episode is recorded as skipped)",
    description=(
        "EgoSmith WebDataset samples of one episode (image.jpg, lowdim.npy, mano.npy, "
        "meta.json per head-camera frame) in tar shards + episode.json; skipped (with the "
        "reason) when the capture has no head camera."
    ),
    storage_kind="files",
    # Decodes one video and JPEG-encodes it frame by frame: CPU bound, one frame in memory.
    step_resources=("1", "2Gi"),
    # Before CERES: its decode leaves the sample behind CERES's camera statistics, which a
    # CERES export of the same video in the process then takes instead of decoding
    # (`ego_assets.formats.camera_sample`).
    run_priority=1,
)

# Every export format, in the order the page, the demo and the catalog show them.
FORMATS: tuple[ExportFormat, ...] = (HOLOS, CERES, EGOSMITH)


def formats() -> tuple[ExportFormat, ...]:
    """Every export format now (callers ask at call time, never keep a copy at import)."""
    return FORMATS


def run_order() -> tuple[ExportFormat, ...]:
    """Every export format in the order to run them one after another in one process:
    highest `ExportFormat.run_priority` first, `FORMATS` order among equals."""
    return tuple(sorted(formats(), key=lambda f: -f.run_priority))


def names() -> tuple[str, ...]:
    """Every format's ``name`` (exporter asset, receipts' format), in `FORMATS` order."""
    return tuple(f.name for f in formats())


def by_name(name: str) -> ExportFormat:
    """The format called ``name``; KeyError naming the known ones otherwise."""
    for fmt in formats():
        if fmt.name == name:
            return fmt
    raise KeyError(f"no exporter named {name!r}; exporters: {sorted(names())}")


def by_route(route: str) -> ExportFormat | None:
    """The format served at API route ``route`` (None: no such route)."""
    return next((f for f in formats() if f.route == route), None)


def policy_keys() -> tuple[str, ...]:
    """Every format's policy key, in the order gates list blocked exports: `FORMATS`
    last first (``webdataset``, ``lerobot``, ``robomimic``: the order stored gates have)."""
    return tuple(f.policy_key for f in reversed(formats()))


def asset_names(keys: tuple[str, ...]) -> tuple[str, ...]:
    """The ``name`` (exporter asset, API ``format``) of each export-policy key, in the
    same order; a key no format has now is kept as it is."""
    by_key = {f.policy_key: f.name for f in formats()}
    return tuple(by_key.get(key, key) for key in keys)


def policy_key(name: str) -> str:
    """The export-policy name of format ``name``."""
    return by_name(name).policy_key
