"""Provenance of an imported capture: ``ego_provenance.json``, written by the importers.

An imported capture (`ego_assets.importers`) carries, beside the source's own files
(byte for byte), one JSON document saying where they came from::

    {"schema": "ego-import-provenance", "schema_version": 1,
     "importer": "egodex", "dataset": "egodex", "dataset_version": "…" | null,
     "licence": "<licence text as given>", "source": "<SRC as given>",
     "original_path": "<episode path relative to SRC>",
     "files": [{"path": "<capture file>", "original": "<path relative to SRC>",
                "bytes": N, "sha256": "…"}]}

The files' digests identify the source version when the dataset names none. Readers of
imported kinds list it as a `FileRef` with role `PROVENANCE_ROLE`; the catalog reads
``dataset`` from it (``source_dataset``).
"""

from __future__ import annotations

from typing import Any

from ego_assets.capture.files import CaptureFiles, require
from ego_assets.trajectory.model import FileRef

PROVENANCE_FILE = "ego_provenance.json"
PROVENANCE_FORMAT = "ego-import-provenance"
PROVENANCE_VERSION = 1
PROVENANCE_ROLE = "import_provenance"


def read_provenance(files: CaptureFiles) -> dict[str, Any]:
    """The capture's provenance document, checked for format, version and dataset."""
    doc = files.read_schema_document(PROVENANCE_FILE, PROVENANCE_FORMAT, PROVENANCE_VERSION)
    require(files, PROVENANCE_FILE, doc, "dataset", str)
    require(files, PROVENANCE_FILE, doc, "original_path", str)
    return doc


def provenance_ref() -> FileRef:
    """The `FileRef` a reader lists for ``ego_provenance.json``."""
    return FileRef(PROVENANCE_ROLE, PROVENANCE_FILE, "application/json")
