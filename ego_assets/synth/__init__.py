"""Synthetic raw captures for every source kind, byte-deterministic per seed.

`synthesize` writes one capture folder in exactly the raw layout of
docs/capture-formats.md, optionally with injected faults (`FAULTS`), and finishes with
the completion marker ``ego_capture.json`` listing every other file.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from pathlib import Path

from ego_assets.capture.manifest import write_marker
from ego_assets.synth.faults import (
    FAULT_MEANINGS,
    FAULTS,
    PLAUSIBILITY_FAULTS,
    FaultPlan,
    make_plan,
)
from ego_assets.synth.holos import write_holos
from ego_assets.synth.mano_video import write_mano_video
from ego_assets.synth.motion import make_scene
from ego_assets.synth.webxr import write_webxr

__all__ = ["FAULTS", "FAULT_MEANINGS", "KINDS", "KIND_MEANINGS", "MARKER_KINDS", "synthesize"]

log = logging.getLogger(__name__)

KINDS = ("holos-visionpro", "holos-iphone", "webxr", "mano-video")
# One line per kind for `ego-assets synth --help` (docs/capture-formats.md has the layouts).
KIND_MEANINGS = {
    "holos-visionpro": "Apple Vision Pro: ARKit hands 90 Hz, head pose, stereo video, audio",
    "holos-iphone": "iPhone: Vision hand landmarks 15 Hz, phone pose, IMU, back camera",
    "webxr": "browser headset (Quest-like) journal: 25-joint hands 30 Hz, head, camera",
    "mano-video": "head camera video with MANO hands estimated afterwards (30 fps)",
}
MARKER_KINDS = {
    "holos-visionpro": "holos",
    "holos-iphone": "holos",
    "webxr": "webxr",
    "mano-video": "mano_video",
}
APPLICABLE_FAULTS = {
    kind: tuple(
        f
        for f in FAULTS
        if kind in PLAUSIBILITY_FAULTS.get(f, KINDS)
        and not (kind == "mano-video" and f == "retried_segment")
    )
    for kind in KINDS
}


def check_options(kind: str, seconds: float, faults: Sequence[str] = ()) -> None:
    """Raise ValueError, before anything is written, for a kind not in `KINDS`, a
    duration that is not a finite number of seconds > 0, or a fault not in `FAULTS`."""
    if kind not in KINDS:
        raise ValueError(f"unknown capture kind {kind!r}; known: {list(KINDS)}")
    if not (seconds > 0 and math.isfinite(seconds)):
        raise ValueError(f"seconds must be a finite number > 0, got {seconds!r}")
    FaultPlan(frozenset(faults), 0, seconds)  # refuses unknown fault names


def synthesize(
    kind: str,
    out: Path,
    *,
    seconds: float,
    seed: int,
    faults: Sequence[str] = (),
    capture_id: str | None = None,
    depth: bool = False,
    library_dir: Path | None = None,
) -> Path:
    """Write one synthetic capture folder.

    Args:
        kind: one of `KINDS`.
        out: capture folder to create; it must not exist or must be empty.
        seconds: capture duration, seconds (finite, > 0).
        seed: seed; the same (kind, seconds, seed, faults) give identical bytes.
        faults: fault options from `FAULTS`; one that does not apply to ``kind`` is
            ignored with a logged note.
        capture_id: id written into the metadata (default ``synth-<kind>-<seed>``).
        depth: mano-video only: also write ``depth.npz``.
        library_dir: folder of the handy.js pose library (default: the packaged recordings).

    Returns:
        ``out``.
    """
    check_options(kind, seconds, faults)
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FileExistsError(f"capture folder {out} exists and is not empty")
    plan = make_plan(faults, seed, seconds, APPLICABLE_FAULTS[kind])
    scene = make_scene(seed, seconds, library_dir)
    cid = capture_id or f"synth-{kind}-{seed}"
    out.mkdir(parents=True, exist_ok=True)
    if kind == "holos-visionpro":
        write_holos(out, "visionpro", seconds, scene, plan, cid)
    elif kind == "holos-iphone":
        write_holos(out, "iphone", seconds, scene, plan, cid)
    elif kind == "webxr":
        write_webxr(out, seconds, scene, plan, cid)
    else:
        write_mano_video(out, seconds, scene, plan, cid, depth)
    write_marker(out, MARKER_KINDS[kind])
    log.info("synthesized %s capture %s (%.1f s, seed %d) in %s", kind, cid, seconds, seed, out)
    return out
