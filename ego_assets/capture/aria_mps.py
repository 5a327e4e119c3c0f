"""Reader for Project Aria MPS hand-tracking outputs (``aria_mps`` captures).

Reads every ``hand_tracking_results*.csv`` (v1: 143 columns, v2: 155 with normals) and
``wrist_and_palm_poses*.csv`` (15 columns, 27 with normals, or the 129-column landmark
variant) in the capture, in the Aria device frame (metres), on the device clock
(``tracking_timestamp_us``; epoch unknown, so ``clock == "device"``). A confidence of
-1 means the hand is missing; any confidence <= 0 is treated as untracked. Values are
kept exactly as read, including the known column-order quirk of
``wrist_and_palm_poses_v2.csv``, which is reported as a `Quirk`. ``summary.json`` is
kept verbatim as a `FileRef`.
"""

from __future__ import annotations

import fnmatch
import logging
from collections.abc import Sequence
from pathlib import PurePosixPath

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ego_assets.capture.files import MARKER_FILE, CaptureFiles, column_block
from ego_assets.capture.ranges import DEVICE_US, check_times
from ego_assets.trajectory.joints import ARIA21
from ego_assets.trajectory.model import CaptureInfo, FileRef, Quirk, Trajectory
from ego_assets.trajectory.streams import AttrValue, Stream, make_stream

logger = logging.getLogger(__name__)

SUMMARY_JSON = "summary.json"
RESULTS_PATTERN = "hand_tracking_results*.csv"
WRIST_PATTERN = "wrist_and_palm_poses*.csv"
TIMESTAMP = "tracking_timestamp_us"
SIDES = ("left", "right")
WRIST_LANDMARK = ARIA21.index("wrist")
PALM_LANDMARK = ARIA21.index("palm_center")


def _landmarks(side: str) -> list[str]:
    return [f"t{a}_{side}_landmark_{i}_device" for i in range(len(ARIA21)) for a in "xyz"]


def _device_wrist(side: str) -> list[str]:
    return [f"t{a}_{side}_device_wrist" for a in "xyz"] + [
        f"q{a}_{side}_device_wrist" for a in "xyzw"
    ]


def _points(side: str, part: str) -> list[str]:
    return [f"t{a}_{side}_{part}_device" for a in "xyz"]


def _normals(side: str, part: str) -> list[str]:
    return [f"n{a}_{side}_{part}_device" for a in "xyz"]


_NORMAL_COLUMNS = [c for s in SIDES for p in ("palm", "wrist") for c in _normals(s, p)]
RESULTS_V1 = [
    TIMESTAMP,
    "left_tracking_confidence",
    *_landmarks("left"),
    "right_tracking_confidence",
    *_landmarks("right"),
    *_device_wrist("left"),
    *_device_wrist("right"),
]
RESULTS_V2 = [*RESULTS_V1, *_NORMAL_COLUMNS]
WRIST_V1 = [
    TIMESTAMP,
    *(
        c
        for s in SIDES
        for c in (f"{s}_tracking_confidence", *_points(s, "wrist"), *_points(s, "palm"))
    ),
]
WRIST_V2 = [*WRIST_V1, *_NORMAL_COLUMNS]
WRIST_LANDMARKS = [
    TIMESTAMP,
    *(c for s in SIDES for c in (f"{s}_tracking_confidence", *_landmarks(s))),
]
# file pattern -> the headers MPS writes for it (told apart by their column count)
VARIANTS = {
    RESULTS_PATTERN: (RESULTS_V1, RESULTS_V2),
    WRIST_PATTERN: (WRIST_V1, WRIST_V2, WRIST_LANDMARKS),
}

QUIRK_FIELD = "right_tracking_confidence"
QUIRK_DESCRIPTION = (
    "rows without a hand are written in another column order than the header (normals "
    "after each hand's positions): right_tracking_confidence reads 0 and "
    "tz_right_palm_device reads -1; values kept as read, confidence <= 0 is untracked"
)


def _pick_header(files: CaptureFiles, rel: str, pattern: str) -> list[str]:
    """The MPS header variant whose column count is closest to the file's header."""
    n = files.read_line(rel).count(",") + 1
    return min(VARIANTS[pattern], key=lambda cols: abs(len(cols) - n))


def _side_streams(
    stem: str, rel: str, table: pa.Table, header: Sequence[str], side: str, start_ns: int
) -> list[Stream]:
    """``<stem>.hand_<side>`` (when landmarks exist) and ``<stem>.wrist_<side>``."""
    n = table.num_rows
    ts = table.column(TIMESTAMP).to_numpy().astype(np.int64) * 1000
    confidence = table.column(f"{side}_tracking_confidence").to_numpy()
    valid = confidence > 0
    base: dict[str, AttrValue] = {"hand": side, "frame": "device", "source_file": rel}
    out = []
    wrist: dict[str, np.ndarray] = {}
    landmark_cols = _landmarks(side)
    if landmark_cols[0] in header:
        position = column_block(table, landmark_cols).reshape(n, len(ARIA21), 3)
        hand = {"position": position, "hand_valid": valid, "hand_confidence": confidence}
        attrs = {**base, "joint_set": "aria21"}
        out.append(make_stream(f"{stem}.hand_{side}", "hand_joints", ts, start_ns, hand, attrs))
        wrist["wrist_position"] = position[:, WRIST_LANDMARK].copy()
        wrist["palm_position"] = position[:, PALM_LANDMARK].copy()
    device_wrist = _device_wrist(side)
    if device_wrist[0] in header:
        wrist["wrist_position"] = column_block(table, device_wrist[:3])
        wrist["wrist_rotation"] = column_block(table, device_wrist[3:])
    if _points(side, "wrist")[0] in header:
        wrist["wrist_position"] = column_block(table, _points(side, "wrist"))
        wrist["palm_position"] = column_block(table, _points(side, "palm"))
    if _normals(side, "palm")[0] in header:
        wrist["palm_normal"] = column_block(table, _normals(side, "palm"))
        wrist["wrist_normal"] = column_block(table, _normals(side, "wrist"))
    wrist.update(hand_valid=valid, hand_confidence=confidence)
    out.append(make_stream(f"{stem}.wrist_{side}", "wrist_palm", ts, start_ns, wrist, base))
    return out


def _column_order_quirk(rel: str, table: pa.Table, header: Sequence[str]) -> Quirk | None:
    """The wrist_and_palm_poses_v2 quirk: rows reading right confidence 0, tz_right_palm -1."""
    if list(header) != WRIST_V2:
        return None
    rows = int(
        np.count_nonzero(
            (table.column(QUIRK_FIELD).to_numpy() == 0)
            & (table.column("tz_right_palm_device").to_numpy() == -1)
        )
    )
    if not rows:
        return None
    logger.warning("%s: %d rows in the known MPS column-order quirk, kept as read", rel, rows)
    return Quirk(file=rel, description=QUIRK_DESCRIPTION, rows=rows, field=QUIRK_FIELD)


def _mps_files(files: CaptureFiles, all_files: Sequence[str]) -> list[tuple[str, str]]:
    """(relative path, matching pattern) of every MPS CSV, checked for unique stems."""
    found = [
        (rel, pattern)
        for rel in all_files
        for pattern in VARIANTS
        if fnmatch.fnmatchcase(PurePosixPath(rel).name, pattern)
    ]
    stems: dict[str, str] = {}
    for rel, _ in found:
        stem = PurePosixPath(rel).stem
        if stem in stems:
            raise files.error(rel, f"same file name as {stems[stem]!r}: stream names would clash")
        stems[stem] = rel
    return found


def read_aria_mps(files: CaptureFiles, marker: dict) -> Trajectory:
    """Read MPS hand-tracking outputs into the canonical `Trajectory`.

    Args:
        files: the capture folder.
        marker: the validated completion marker (kind ``aria_mps``).

    Returns:
        Per CSV ``<stem>``: ``<stem>.hand_{left,right}`` (hand_joints, aria21, (T, 21, 3)
        metres, device frame) when the file has landmarks, and ``<stem>.wrist_{left,right}``
        (wrist_palm: positions, normals, ``wrist_rotation`` from ``q*_device_wrist``).
        ``hand_valid`` is ``confidence > 0``. ``start_ns`` is the smallest timestamp of any
        file, on the device clock.

    Raises:
        CaptureFormatError: no MPS CSV, or a malformed one (naming file, field and row).
    """
    all_files = files.list_files()
    mps = _mps_files(files, all_files)
    if not mps:
        raise files.error(".", f"no MPS hand-tracking file ({RESULTS_PATTERN} or {WRIST_PATTERN})")
    tables = []
    for rel, pattern in mps:
        header = _pick_header(files, rel, pattern)
        table = files.read_csv(rel, header, {TIMESTAMP: pa.int64()})
        check_times(files, rel, TIMESTAMP, table.column(TIMESTAMP).to_numpy(), DEVICE_US)
        tables.append((rel, header, table))
    start_ns = min(int(pc.min(t.column(TIMESTAMP)).as_py()) for _, _, t in tables) * 1000
    streams: list[Stream] = []
    quirks: list[Quirk] = []
    for rel, header, table in tables:
        stem = PurePosixPath(rel).stem
        for side in SIDES:
            streams.extend(_side_streams(stem, rel, table, header, side, start_ns))
        quirk = _column_order_quirk(rel, table, header)
        if quirk is not None:
            quirks.append(quirk)

    version = ""
    file_refs: tuple[FileRef, ...] = ()
    if SUMMARY_JSON in all_files:
        summary = files.read_json(SUMMARY_JSON)
        if not isinstance(summary, dict):
            raise files.error(SUMMARY_JSON, "expected a JSON object")
        version = str(summary.get("version", ""))
        file_refs = (FileRef("mps_summary", SUMMARY_JSON, "application/json"),)
    consumed = {MARKER_FILE, SUMMARY_JSON, *(rel for rel, _ in mps)}
    info = CaptureInfo(
        capture_id=files.capture,
        source_kind="aria-mps",
        source_version=f"mps {version}".strip(),
        start_ns=start_ns,
        clock="device",
        device="Project Aria",
        app="Machine Perception Services hand tracking",
    )
    return Trajectory(
        info=info,
        streams=tuple(streams),
        files=file_refs,
        extra_files=tuple(p for p in all_files if p not in consumed),
        quirks=tuple(quirks),
    )
