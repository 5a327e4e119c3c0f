"""Reader for ``egosmith_webdataset`` captures: one episode of EgoSmith WebDataset shards.

The capture folder (landed by ``ego-assets import egosmith-webdataset``) holds:

* ``samples.tar``: the episode's samples in key (frame) order, every member's bytes as
  in the source shards (``image.jpg``, ``lowdim.npy``, ``mano.npy``, ``meta.json``,
  ``depth.npy``);
* ``video.mkv``: the samples' JPEGs as one Motion-JPEG stream (the JPEG bytes are the
  packets: nothing decoded or re-encoded), frame ``k`` = sample ``k``, shown at the
  sample's time.

Streams, one row per sample, on the samples' clock (``meta.json`` ``timestamp_ns`` when
the writer added it, else frame number / `DEFAULT_FPS`):

* ``video_frames`` (``media_frames``): the key's frame number, intrinsics ``fx, fy, cx,
  cy`` and the world-to-camera matrix of the lowdim vector (OpenCV axes); NaN where
  meta says ``extrinsic_valid = false`` (the export wrote zeros there);
* ``wrist_<side>`` (``wrist_palm``): wrist position (MANO joint 0) and the wrist ->
  world rotation rebuilt from rot6d (Gram-Schmidt, as a quaternion xyzw); valid = the
  ``presence`` bit;
* ``hand_<side>`` (``hand_joints``, ``mediapipe21``): the wrist and the five fingertips;
  the 15 other joints are NaN and untracked (``missing_joints``); sample flags are those
  of the values the sample holds;
* ``mano_<side>`` (``mano``) when ``meta.json`` says ``mano_source = "mano"``: transl,
  global_orient, hand_pose (P = K - 6 - B), betas (B = 10, EgoSmith's), valid = presence;
  pose space and ``flat_hand_mean`` from ``episode.json`` when the capture carries it,
  else ``pca`` / false (EgoSmith's estimator).

Values are the float32 of the shards widened to float64. Instructions, the language code,
dataset name, clip id and split come from the first sample's ``meta.json``.
"""

from __future__ import annotations

import io
import json
import logging
import tarfile
from collections.abc import Mapping
from typing import Any

import numpy as np
from scipy.spatial.transform import Rotation

from ego_assets.capture.files import CaptureFiles
from ego_assets.capture.holos_hdf5 import imported_files
from ego_assets.capture.media import probe_video
from ego_assets.formats import egosmith_constants
from ego_assets.trajectory.joints import FINGERTIPS, JOINT_SETS, WRIST
from ego_assets.trajectory.model import Annotations, CaptureInfo, Trajectory
from ego_assets.trajectory.streams import Stream, make_stream, sample_flags

log = logging.getLogger(__name__)

SOURCE_KIND = "egosmith-webdataset"
SAMPLES_FILE = "samples.tar"
VIDEO_FILE = "video.mkv"
EPISODE_FILE = "episode.json"
VIDEO_MIME = "video/x-matroska"
DEFAULT_FPS = 30.0  # frame rate assumed when meta.json has no timestamp_ns
MP21 = "mediapipe21"
_HAND_JOINTS = (WRIST[MP21], *FINGERTIPS[MP21])


def read_samples(files: CaptureFiles) -> tuple[list[str], dict[str, list[bytes]]]:
    """Keys and member bytes (extension -> list over samples) of ``samples.tar``.

    Raises:
        CaptureFormatError: a truncated or unreadable tar, a member that is not a file,
            a sample without one of the required members (named by key as the field).
    """
    keys: list[str] = []
    members: dict[str, list[bytes]] = {ext: [] for ext in egosmith_constants.EXTENSIONS}
    current: dict[str, bytes] = {}

    def finish() -> None:
        missing = [e for e in egosmith_constants.REQUIRED_EXTENSIONS if e not in current]
        if missing:
            raise files.error(
                SAMPLES_FILE, f"sample lacks {', '.join(missing)}", field=keys[-1], row=len(keys)
            )
        for ext in egosmith_constants.EXTENSIONS:
            if ext in current:
                members[ext].append(current[ext])

    try:
        with tarfile.open(files.path(SAMPLES_FILE), mode="r:") as tar:
            for info in tar:
                if not info.isfile():
                    raise files.error(SAMPLES_FILE, "member is not a regular file", field=info.name)
                key, _, ext = info.name.partition(".")
                if ext not in egosmith_constants.EXTENSIONS:
                    raise files.error(SAMPLES_FILE, f"unknown extension {ext!r}", field=info.name)
                if not keys or key != keys[-1]:
                    if keys:
                        finish()
                    keys.append(key)
                    current = {}
                fh = tar.extractfile(info)
                current[ext] = fh.read() if fh is not None else b""
    except (tarfile.TarError, EOFError) as exc:
        raise files.error(SAMPLES_FILE, f"unreadable or truncated tar: {exc}") from None
    if not keys:
        raise files.error(SAMPLES_FILE, "no samples")
    finish()
    return keys, members


def _npy(files: CaptureFiles, data: list[bytes], what: str, shape: tuple[int, ...] | None):
    arrays = []
    for i, raw in enumerate(data):
        try:
            a = np.load(io.BytesIO(raw), allow_pickle=False)
        except ValueError as exc:
            raise files.error(
                SAMPLES_FILE, f"not a .npy array: {exc}", field=what, row=i + 1
            ) from None
        if a.dtype != np.float32 or (shape is not None and a.shape != shape):
            raise files.error(
                SAMPLES_FILE,
                f"{a.dtype} {a.shape}, expected float32 {shape}",
                field=what,
                row=i + 1,
            )
        arrays.append(a)
    if len({a.shape for a in arrays}) > 1:
        raise files.error(SAMPLES_FILE, "samples disagree on the shape", field=what)
    return np.stack(arrays).astype(np.float64)


def read_egosmith_webdataset(files: CaptureFiles, marker: Mapping[str, Any]) -> Trajectory:
    """Read an ``egosmith_webdataset`` capture folder into the canonical `Trajectory`.

    Raises:
        CaptureFormatError: naming the file, the member or meta field, and the sample row.
    """
    keys, members = read_samples(files)
    n = len(keys)
    metas = []
    for i, raw in enumerate(members["meta.json"]):
        try:
            meta = json.loads(raw)
        except ValueError as exc:
            raise files.error(SAMPLES_FILE, f"meta.json: {exc}", field=keys[i], row=i + 1) from None
        if not isinstance(meta, dict) or "presence" not in meta:
            raise files.error(SAMPLES_FILE, "meta.json lacks presence", field=keys[i], row=i + 1)
        metas.append(meta)
    lowdim = _npy(files, members["lowdim.npy"], "lowdim.npy", (egosmith_constants.LOWDIM_DIM,))
    mano = _npy(files, members["mano.npy"], "mano.npy", None)
    frames = np.array([_frame(files, k, i) for i, k in enumerate(keys)], np.int64)
    first = metas[0]
    if all(isinstance(m.get("timestamp_ns"), int) for m in metas):
        ts = np.array([m["timestamp_ns"] for m in metas], np.int64)
        start_ns, clock = int(ts[0]), "epoch"
    else:
        ts = np.round(frames * (1e9 / DEFAULT_FPS)).astype(np.int64)
        start_ns, clock = 0, "device"
    presence = np.array([int(m["presence"]) for m in metas], np.int64)
    common = {"source_file": SAMPLES_FILE}
    streams = [_frames_stream(lowdim, metas, frames, ts, start_ns)]
    for side, bit in (
        ("left", egosmith_constants.PRESENCE_LEFT),
        ("right", egosmith_constants.PRESENCE_RIGHT),
    ):
        present = (presence & bit) > 0
        streams += _hand_streams(lowdim, side, present, ts, start_ns, common, first)
        if first.get("mano_source") == "mano":
            streams.append(_mano_stream(files, mano, side, present, ts, start_ns, common))
    probe = probe_video(files, VIDEO_FILE)
    if probe.frame_count != n:
        raise files.error(VIDEO_FILE, f"holds {probe.frame_count} frames, {SAMPLES_FILE} {n}")
    info = CaptureInfo(
        capture_id=files.capture,
        source_kind=SOURCE_KIND,
        source_version=f"{first.get('lowdim_schema', '')} from {first.get('source_kind', '?')}",
        start_ns=start_ns,
        clock=clock,
        source_capture_id=str(first.get("clip_id", "")),
        dataset_name=str(first.get("dataset_name", "")),
        split=str(first.get("split", "")),
    )
    instructions = first.get("instruction", [])
    log.info("egosmith_webdataset %s: %d samples", files.capture, n)
    return Trajectory(
        info=info,
        streams=tuple(streams),
        annotations=Annotations(
            instructions=tuple(str(s) for s in instructions)
            if isinstance(instructions, list)
            else (),
            language=str(first.get("language_code", "")),
        ),
        media=(probe.media_ref("video", VIDEO_FILE, VIDEO_MIME, frames_stream="video_frames"),),
        files=imported_files(files),
    )


def _frame(files: CaptureFiles, key: str, row: int) -> int:
    head, sep, frame = key.rpartition("_f")
    if not sep or not frame.isdigit() or "_ep" not in head:
        raise files.error(
            SAMPLES_FILE, "not an EgoSmith key <dataset>_epNNNNNN_fNNNNNN", field=key, row=row + 1
        )
    return int(frame)


def _frames_stream(
    lowdim: np.ndarray,
    metas: list[dict[str, Any]],
    frames: np.ndarray,
    ts: np.ndarray,
    start_ns: int,
) -> Stream:
    valid = np.array([bool(m.get("extrinsic_valid", True)) for m in metas])
    w2c = lowdim[:, egosmith_constants.EXTRINSIC].reshape(-1, 4, 4)
    intrinsics = lowdim[:, egosmith_constants.INTRINSIC]
    return make_stream(
        "video_frames",
        "media_frames",
        ts,
        start_ns,
        {
            "frame_index": frames,
            "intrinsics": np.where(valid[:, None], intrinsics, np.nan),
            "world_to_camera": np.where(valid[:, None, None], w2c, np.nan),
        },
        {"media": "video", "camera_axes": "opencv", "source_file": SAMPLES_FILE},
    )


def rot6d_matrix(six: np.ndarray) -> np.ndarray:
    """(N, 3, 3) rotation from (N, 6) rot6d (first column, second column), Gram-Schmidt.

    Rows whose columns are zero or parallel come out NaN.
    """
    a, b = six[:, :3], six[:, 3:]
    with np.errstate(invalid="ignore", divide="ignore"):
        x = a / np.linalg.norm(a, axis=1, keepdims=True)
        b = b - np.sum(x * b, axis=1, keepdims=True) * x
        y = b / np.linalg.norm(b, axis=1, keepdims=True)
    return np.stack([x, y, np.cross(x, y)], axis=-1)


def _hand_streams(
    lowdim: np.ndarray,
    side: str,
    present: np.ndarray,
    ts: np.ndarray,
    start_ns: int,
    common: Mapping[str, Any],
    meta: Mapping[str, Any],
) -> list[Stream]:
    n = len(lowdim)
    wrist_state = lowdim[:, egosmith_constants.WRIST_STATE]
    tips = lowdim[:, egosmith_constants.HAND_STATE][
        :, egosmith_constants.LEFT_TIPS if side == "left" else egosmith_constants.RIGHT_TIPS
    ]
    wrist = wrist_state[
        :, egosmith_constants.LEFT_TRANS if side == "left" else egosmith_constants.RIGHT_TRANS
    ]
    six = wrist_state[
        :, egosmith_constants.LEFT_ROT6D if side == "left" else egosmith_constants.RIGHT_ROT6D
    ]
    matrix = rot6d_matrix(six)
    ok = present & np.isfinite(matrix).all(axis=(1, 2))
    quat = np.full((n, 4), np.nan)
    if ok.any():
        quat[ok] = Rotation.from_matrix(matrix[ok]).as_quat()
    quat[~ok] = (0.0, 0.0, 0.0, 1.0)
    source = meta.get("wrist_rotation_source", {})
    attrs = {**common, "hand": side, "frame": "world"}
    if isinstance(source, dict) and source.get(side):
        attrs["rotation_source"] = str(source[side])
    wrist_stream = make_stream(
        f"wrist_{side}",
        "wrist_palm",
        ts,
        start_ns,
        {"wrist_position": wrist, "wrist_rotation": quat, "hand_valid": present},
        attrs,
    )
    joints = len(JOINT_SETS[MP21])
    position = np.full((n, joints, 3), np.nan)
    position[:, _HAND_JOINTS[0]] = wrist
    position[:, list(_HAND_JOINTS[1:])] = tips.reshape(n, 5, 3)
    joint_valid = np.zeros((n, joints), bool)
    joint_valid[:, list(_HAND_JOINTS)] = present[:, None]
    held = {"position": position[:, list(_HAND_JOINTS)]}
    missing = [name for i, name in enumerate(JOINT_SETS[MP21]) if i not in _HAND_JOINTS]
    hand = Stream(
        f"hand_{side}",
        "hand_joints",
        ts,
        (ts - np.int64(start_ns)).astype(np.float64) / 1e9,
        {"position": position, "joint_valid": joint_valid, "hand_valid": present},
        {
            **common,
            "joint_set": MP21,
            "hand": side,
            "frame": "world",
            "missing_joints": ", ".join(missing),
        },
        sample_flags(ts, held),
    )
    return [wrist_stream, hand]


def _mano_stream(
    files: CaptureFiles,
    mano: np.ndarray,
    side: str,
    present: np.ndarray,
    ts: np.ndarray,
    start_ns: int,
    common: Mapping[str, Any],
) -> Stream:
    width = mano.shape[2]
    pose = width - egosmith_constants.MANO_POSE_START - egosmith_constants.DEFAULT_MANO_BETAS
    if pose < 1:
        raise files.error(
            SAMPLES_FILE, f"mano.npy rows of {width} values hold no pose", field="mano.npy"
        )
    schema = _episode_mano(files)
    row = mano[:, egosmith_constants.HANDS.index(side)]
    return make_stream(
        f"mano_{side}",
        "mano",
        ts,
        start_ns,
        {
            "transl": row[:, egosmith_constants.MANO_TRANSL],
            "global_orient": row[:, egosmith_constants.MANO_GLOBAL_ORIENT],
            "hand_pose": row[
                :, egosmith_constants.MANO_POSE_START : egosmith_constants.MANO_POSE_START + pose
            ],
            "betas": row[:, egosmith_constants.MANO_POSE_START + pose :],
            "valid_detected": present,
        },
        {
            **common,
            "hand": side,
            "frame": "world",
            "mano_pose_space": str(schema.get("pose_space", "pca")),
            "flat_hand_mean": bool(schema.get("flat_hand_mean", False)),
        },
    )


def _episode_mano(files: CaptureFiles) -> dict[str, Any]:
    if not files.exists(EPISODE_FILE):
        return {}
    doc = files.read_json(EPISODE_FILE)
    mano = doc.get("mano") if isinstance(doc, dict) else None
    return mano if isinstance(mano, dict) else {}
