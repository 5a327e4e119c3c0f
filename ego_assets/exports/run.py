"""`run_export`: the one export step every format goes through (gate, index, reuse, write,
receipt, result); a format supplies only its `Exporter`.

For one capture and one format (an `ExportFormat` of `ego_assets.exports.registry`):

1. **gate**: the capture's stored gate must allow the format's policy key
   (`require_export_gate`; `ExportBlockedError` naming the reasons, nothing written);
2. **episode index**: the capture's stable index from the shared
   `EpisodeIndexRegistry`, for the formats that number episodes
   (`Exporter.uses_episode_index`);
3. **reuse**: the finished export's index record (`Exporter.stored`) names the data
   version asked for (`Exporter.is_current`): nothing is written. One rule for the
   receipt: a stored export whose receipt is missing, or names another gate data
   version, gets its receipt (again) from the stored artefact;
4. **write**: otherwise the format writes its folder into a staging folder
   (`Storage.write_to`: a hidden sibling renamed into place locally, an upload with the
   index file last on S3), so a killed run leaves the previous export or nothing;
5. **receipt**: digested from the staged copy, written once the folder is in place;
6. **result**: a `StepResult` with the format's figures.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

from upath import UPath

from ego_assets.catalog.receipts import ExportReceipt, make_receipt, read_receipt, write_receipt
from ego_assets.exports.episode_index import EpisodeIndexRegistry
from ego_assets.exports.registry import ExportFormat, ExportOption
from ego_assets.pipeline import StepResult, stored_gate
from ego_assets.quality.gate import Gate, require_gate
from ego_assets.storage import Storage

WHOLE_FOLDER = ""  # `Written.artefact` / `Exporter.artefact` of a folder receipt


@dataclass(frozen=True, slots=True)
class Written:
    """What an exporter's `Exporter.write` wrote into the staging folder.

    Attributes:
        record: the export's index record (what `Exporter.stored` reads back).
        artefact: the receipt's artefact below the export folder (a file or a folder;
            `WHOLE_FOLDER` for the folder itself).
        skipped: why the format wrote no data for the capture ("" when it did); the
            receipt is then ``skipped`` with this reason.
        digests: SHA-256 of files of a folder artefact the writer hashed as it wrote
            them, by path relative to the artefact: the receipt's digest does not read
            them again.
    """

    record: Any
    artefact: str = WHOLE_FOLDER
    skipped: str = ""
    digests: Mapping[str, str] = field(default_factory=dict)


class Exporter(Protocol):
    """One format's writer and how to read back what it wrote (see `run_export`).

    ``OPTIONS`` are the exporter's own options (its Dagster asset's config fields, with
    ``force``); `from_options` builds the exporter from their values.
    """

    OPTIONS: ClassVar[tuple[ExportOption, ...]]

    @classmethod
    def from_options(cls, values: Mapping[str, Any]) -> Exporter:
        """The exporter for option values (one per `OPTIONS` entry, by name)."""
        ...

    @property
    def format(self) -> ExportFormat:
        """The format's registry entry."""
        ...

    @property
    def index_file(self) -> str:
        """The file written last: a folder without it is unfinished."""
        ...

    @property
    def uses_episode_index(self) -> bool:
        """Whether the format numbers episodes (`EpisodeIndexRegistry`)."""
        ...

    def target(self, storage: Storage, key: str) -> UPath:
        """The capture's export folder (``exports/<folder>/<key>``)."""
        ...

    def data_version(
        self, storage: Storage, key: str, gate_version: str | None, episode_index: int
    ) -> str:
        """The version the export is current at (code, options, inputs; ``gate_version``:
        the data version of the gate that allowed it)."""
        ...

    def stored(self, storage: Storage, key: str) -> Any | None:
        """The finished export's index record, or None."""
        ...

    def is_current(self, record: Any, version: str, episode_index: int) -> bool:
        """Whether the stored ``record`` is the export of ``version`` (and index)."""
        ...

    def artefact(self, key: str, record: Any) -> str:
        """The receipt's artefact below the export folder, for a stored ``record``."""
        ...

    def skipped(self, record: Any) -> str:
        """Why a stored ``record`` holds no data ("" when it does)."""
        ...

    def write(
        self, storage: Storage, key: str, stage: Path, version: str, episode_index: int
    ) -> Written:
        """Read what the format needs and write the export into ``stage``."""
        ...

    def figures(self, storage: Storage, key: str, record: Any) -> dict[str, float | int | str]:
        """The step's figures (Dagster metadata) for a written or stored ``record``."""
        ...

    def details(self, storage: Storage, key: str) -> dict[str, Any]:
        """Metadata shown before the figures for an exported (not blocked) capture: a
        path (`UPath`) is shown as a path, a list or dict as JSON ({} for none)."""
        ...


def require_export_gate(storage: Storage, key: str, export: str | None = None) -> Gate:
    """The gate of ``key``; raises `ExportBlockedError` (naming the policy's reasons) unless
    the export policy, after waivers, allows ``export`` (a policy key; None: every export)."""
    return require_gate(stored_gate(storage, key), key, export)


def run_export(
    storage: Storage, key: str, exporter: Exporter, *, force: bool = False
) -> StepResult:
    """Export capture ``key`` with ``exporter`` (see the module docstring).

    ``force`` writes the export again even when the stored one is current.

    Raises:
        ExportBlockedError: the export policy blocks this capture (nothing written).
    """
    gate = require_export_gate(storage, key, exporter.format.policy_key)
    index = EpisodeIndexRegistry(storage).index_for(key) if exporter.uses_episode_index else -1
    return export_capture(
        storage, key, exporter, episode_index=index, gate_version=gate.data_version, force=force
    )


def export_capture(
    storage: Storage,
    key: str,
    exporter: Exporter,
    *,
    episode_index: int,
    gate_version: str | None,
    force: bool = False,
) -> StepResult:
    """Steps 3-6 of `run_export` for a gate and an index already known.

    ``gate_version`` is the data version of the gate that allowed the export; None
    (tools and tests that export without a gate) writes no receipt.
    """
    version = exporter.data_version(storage, key, gate_version, episode_index)
    target = exporter.target(storage, key)
    stored = exporter.stored(storage, key)
    if not force and stored is not None and exporter.is_current(stored, version, episode_index):
        receipt = None if gate_version is None else read_receipt(storage, exporter.format.name, key)
        if gate_version is not None and (
            receipt is None or receipt.input_data_version != gate_version
        ):
            found = Written(stored, exporter.artefact(key, stored), exporter.skipped(stored))
            with storage.read_dir(target) as folder:
                receipt = _receipt(storage, key, exporter, gate_version, target, folder, found)
            write_receipt(storage, receipt)
        return StepResult(key, version, True, exporter.figures(storage, key, stored))
    receipt = None
    with storage.write_to(target, index_file=exporter.index_file) as stage:
        written = exporter.write(storage, key, stage, version, episode_index)
        if gate_version is not None:  # digest the staged copy; written once it is in place
            receipt = _receipt(storage, key, exporter, gate_version, target, stage, written)
    if receipt is not None:
        write_receipt(storage, receipt)
    return StepResult(key, version, False, exporter.figures(storage, key, written.record))


def _receipt(
    storage: Storage,
    key: str,
    exporter: Exporter,
    gate_version: str,
    target: UPath,
    local: Path,
    written: Written,
) -> ExportReceipt:
    """The receipt of ``written``, digested in ``local`` (a staged or read copy of the
    export folder ``target``)."""
    artefact = written.artefact
    return make_receipt(
        storage,
        export_format=exporter.format.name,
        capture_key=key,
        location=target / artefact if artefact else target,
        local=local / artefact if artefact else local,
        code_version=exporter.format.code_version,
        input_data_version=gate_version,
        skipped_reason=written.skipped,
        known=written.digests,
    )
