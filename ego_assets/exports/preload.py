"""Import ahead of the first export what exporters import where they use it.

The exporters import their heavy libraries (PyAV, h5py, ...) inside the functions that
use them, so a process that defines assets or answers HTTP loads none of them. A process
about to export (the warm run parent, an API worker that writes short captures' exports
itself) calls `preload_exports` once, so the first export does not pay for the imports
(about 0.3 s on a quiet core, seconds on a busy one).

Once loaded, `freeze_loaded` moves every object alive (modules, the GX context...) out of
the garbage collector's sight (`gc.freeze`): a full collection otherwise walks those
~340k objects each time a capture's parsing allocates enough (about 80 ms of CPU per
10-s WebXR capture); in a warm parent, frozen objects are also not written to by the
collector, so forked children keep sharing their pages.
"""

from __future__ import annotations

import gc
import importlib
import logging
import pkgutil
from collections.abc import Sequence

log = logging.getLogger(__name__)

# Third-party libraries an export imports on first use.
EXPORT_LIBRARIES = (
    "av",
    "h5py",
    "pyarrow.parquet",
    "scipy.spatial.transform",
    "simplejpeg",
    "PIL.Image",
    "webdataset",
)
EXPORT_PACKAGES = ("ego_assets.exports", "ego_assets.formats")


def import_quietly(names: Sequence[str]) -> list[str]:
    """Import ``names``; returns those that failed (logged: the user imports it itself)."""
    failed = []
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as exc:  # an optional dependency of one module
            log.info("preload: %s not imported: %s", name, exc)
            failed.append(name)
    return failed


def package_modules(packages: Sequence[str]) -> list[str]:
    """``packages`` and every module below them, by name."""
    names = []
    for package in packages:
        names.append(package)
        module = importlib.import_module(package)
        if hasattr(module, "__path__"):
            names += [m.name for m in pkgutil.walk_packages(module.__path__, f"{package}.")]
    return names


def freeze_loaded() -> int:
    """Collect once, then freeze every object alive (`gc.freeze`: later collections skip
    them); returns how many are frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def preload_exports() -> list[str]:
    """Import `EXPORT_LIBRARIES` and our export packages, then `freeze_loaded`; returns the
    names that failed."""
    failed = import_quietly([*EXPORT_LIBRARIES, *package_modules(EXPORT_PACKAGES)])
    freeze_loaded()
    return failed
