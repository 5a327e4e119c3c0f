"""Capture readers: one per source kind, each turning a raw folder into a `Trajectory`."""

from __future__ import annotations

import importlib
import threading
from collections import OrderedDict
from pathlib import Path

from ego_assets.capture.files import CaptureFiles, read_marker
from ego_assets.capture.manifest import RawManifest, check_capture
from ego_assets.keys import validate_capture_key
from ego_assets.trajectory.model import Trajectory
from ego_assets.trajectory.store import read_only

# Trajectories read when a capture was landed (an import reads each episode to refuse a
# bad one before it is published), kept for the next step in the same process (the
# normalize step reads the raw copy of the same bytes): at most this many bytes of
# arrays, the oldest dropped first; each is handed out once.
LANDED_KEEP_BYTES = 128 * 1024 * 1024
_landed: OrderedDict[tuple[str, str], tuple[Trajectory, int]] = OrderedDict()
_landed_lock = threading.Lock()

# marker kind -> (module, reader function); each reader is (CaptureFiles, marker) -> Trajectory
READERS = {
    "holos": ("ego_assets.capture.holos", "read_holos"),
    "webxr": ("ego_assets.capture.webxr", "read_webxr"),
    "mano_video": ("ego_assets.capture.mano_video", "read_mano_video"),
    "aria_mps": ("ego_assets.capture.aria_mps", "read_aria_mps"),
    "egodex": ("ego_assets.capture.egodex", "read_egodex"),
    "lerobot_v3": ("ego_assets.capture.lerobot_v3", "read_lerobot_v3"),
    "holos_hdf5": ("ego_assets.capture.holos_hdf5", "read_holos_hdf5"),
    "egosmith_webdataset": ("ego_assets.capture.egosmith_webdataset", "read_egosmith_webdataset"),
    "mano_sequence": ("ego_assets.capture.mano_sequence", "read_mano_sequence"),
}


def read_capture(capture: str, folder: Path, content_sha256: str | None = None) -> Trajectory:
    """Read the raw capture in ``folder`` (its marker names the kind) into a `Trajectory`.

    ``content_sha256``: the `RawManifest.content_sha256` of ``folder``'s files (the raw
    copy's manifest states it): a trajectory `remember_landed` kept for those bytes is
    returned instead of reading them again (its arrays read-only).

    Raises:
        CaptureFormatError: malformed input, naming capture, file, field and row.
    """
    if content_sha256 is not None:
        with _landed_lock:
            kept = _landed.pop((capture, content_sha256), None)
        if kept is not None:
            return kept[0]
    files = CaptureFiles(validate_capture_key(capture), Path(folder))
    marker = read_marker(files)
    module_name, func = READERS[marker["kind"]]
    reader = getattr(importlib.import_module(module_name), func)
    trajectory: Trajectory = reader(files, marker)
    return trajectory


def remember_landed(manifest: RawManifest, trajectory: Trajectory) -> None:
    """Keep ``trajectory``, read from the capture files ``manifest`` lists, for one
    `read_capture` of the same capture and content (its arrays made read-only)."""
    size = read_only(trajectory)
    if size > LANDED_KEEP_BYTES:
        return
    with _landed_lock:
        _landed[(manifest.capture, manifest.content_sha256)] = (trajectory, size)
        while sum(n for _, n in _landed.values()) > LANDED_KEEP_BYTES:
            _landed.popitem(last=False)


def read_checked_capture(capture: str, folder: Path) -> tuple[Trajectory, RawManifest]:
    """`read_capture` after the intake check of ``raw_capture`` (`check_capture`).

    What ``ego-assets convert`` and ``inspect`` run on a capture folder, so they accept
    exactly what the platform ingests.

    Returns:
        The trajectory and the capture's manifest (files, sizes, content hash).

    Raises:
        CaptureFormatError: whatever `check_capture` or the reader refuses.
    """
    manifest = check_capture(CaptureFiles(validate_capture_key(capture), Path(folder)))
    return read_capture(capture, folder), manifest
