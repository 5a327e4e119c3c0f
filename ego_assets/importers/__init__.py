"""Importers: existing datasets landed as ordinary captures (``ego-assets import KIND SRC``).

`IMPORTERS` maps each KIND to the module and class of its `Importer`
(`ego_assets.importers.core`); a new source kind adds one line here and a capture
reader for its marker kind (`ego_assets.capture.READERS`).
"""

from __future__ import annotations

import importlib

from ego_assets.importers.core import Importer

# KIND -> (module, Importer subclass)
IMPORTERS: dict[str, tuple[str, str]] = {
    "egodex": ("ego_assets.importers.egodex", "EgoDexImporter"),
    "lerobot-v3": ("ego_assets.importers.lerobot_v3", "LeRobotV3Importer"),
    "holos-hdf5": ("ego_assets.importers.holos_hdf5", "HolosHdf5Importer"),
    "egosmith-webdataset": (
        "ego_assets.importers.egosmith_webdataset",
        "EgoSmithWebDatasetImporter",
    ),
    "mano-sequence": ("ego_assets.importers.mano_sequence", "ManoSequenceImporter"),
}


def get_importer(kind: str) -> Importer:
    """The importer of ``kind`` (ValueError naming the known kinds otherwise)."""
    if kind not in IMPORTERS:
        raise ValueError(f"unknown import kind {kind!r}; kinds: {', '.join(sorted(IMPORTERS))}")
    module_name, name = IMPORTERS[kind]
    importer: Importer = getattr(importlib.import_module(module_name), name)()
    return importer
