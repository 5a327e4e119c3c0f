"""Reader for ``egodex`` captures: one EgoDex episode (Apple Vision Pro, ARKit skeletons).

A capture holds the episode's two files, byte for byte, under fixed names, and usually
the importer's ``ego_provenance.json``:

    episode.hdf5    transforms/<name> (N, 4, 4), confidences/<joint> (N,), camera/intrinsic
    episode.mp4     the head camera video (H.264, 30 fps)

What maps to what (docs/importers.md):

* ``transforms/<side>Hand`` .. ``<side>LittleFingerTip`` (25 per side, ARKit hand joint
  order) -> ``hand_<side>_world`` (``arkit27``, frame ``world`` = the ARKit origin of
  the episode, metres). ARKit's ``forearmWrist`` and ``forearmArm`` are not in EgoDex:
  they are NaN with ``joint_valid`` False.
* ``confidences/<joint>`` -> ``joint_confidence``; when the file has no confidences
  group the field is absent (not 1).
* ``transforms/camera`` (camera-to-world, ARKit camera axes) -> ``head`` (pose) and the
  ``video_frames`` ``world_to_camera`` (its inverse); ``camera/intrinsic`` -> per-frame
  ``intrinsics`` and the capture's camera model.
* the 12 body joints and ``<side>Shoulder``, ``Arm``, ``Forearm`` -> one ``pose`` stream
  each, ``body_<name>`` (their confidences have no field there and are not kept).
* root attributes (str or bytes, NUL padding dropped): ``task`` -> title; the LLM
  description marked correct by ``which_llm_description`` -> language and first
  instruction, the other one second; the rest -> capture characteristics.

Time: EgoDex has no timestamps. Frame ``i`` is at ``i / 30`` s on a ``device`` clock that
starts at 0; every stream says so (attr ``time_source``) and a quirk records it.

Faults: a NaN transform is kept and flagged (``valid`` / ``joint_valid`` False, the
rotation NaN). Errors (nothing read): a missing group, dataset or ``transforms/camera``;
a dataset that is not float or not (N, 4, 4) / (N,) with N the camera's frame count; a
finite transform that is not rigid (bottom row not 0 0 0 1, rotation block not
orthonormal within `RIGID_TOLERANCE`, or a reflection), named by field and 1-based
frame; intrinsics that are not a finite 3x3 with positive focal lengths; a video with more
than `VIDEO_SHORT_BY` frames fewer than the transforms. A video short by one or two
frames (a known EgoDex quirk: "transforms and video differ by a frame or two") is kept:
every pose frame stays, ``video_frames`` lists the frames the video holds, and a quirk
names the pose frames without a picture.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import h5py
import numpy as np
from scipy.spatial.transform import Rotation

from ego_assets.capture.files import MARKER_FILE, CaptureFiles
from ego_assets.capture.head_video import head_video, imported_from
from ego_assets.capture.provenance import PROVENANCE_FILE
from ego_assets.trajectory.joints import ARKIT27
from ego_assets.trajectory.model import (
    Annotations,
    CaptureInfo,
    Characteristic,
    FileRef,
    Quirk,
    Trajectory,
)
from ego_assets.trajectory.streams import AttrValue, Stream, make_stream

HDF5_FILE = "episode.hdf5"
VIDEO_FILE = "episode.mp4"
FPS = 30
MAX_FRAMES = FPS * 3600 * 4  # four hours: an episode averages 9 s
# EgoDex's transforms and video are known to differ by a frame or two: a video up to
# this many frames short is kept (every pose frame; a quirk names those without a picture)
VIDEO_SHORT_BY = 2
RIGID_TOLERANCE = 1e-3  # max |R^T R - I| and |bottom row - (0 0 0 1)| of a float32 pose
SIDES = ("left", "right")
_FLOAT32 = h5py.h5t.py_create(np.dtype(np.float32))  # the memory type of every read
BODY = ("hip", *(f"spine{i}" for i in range(1, 8)), *(f"neck{i}" for i in range(1, 5)))
ARM = ("Shoulder", "Arm", "Forearm")
# EgoDex per-side hand names in ARKit HandSkeleton order (joints 0-24 of arkit27)
HAND = tuple("Hand" if j == "wrist" else j[0].upper() + j[1:] for j in ARKIT27[:25])
BODY_JOINTS = (*BODY, *(f"{side}{a}" for side in SIDES for a in ARM))
JOINTS = (*BODY_JOINTS, *(f"{side}{h}" for side in SIDES for h in HAND))
_BLOCK = 2048  # poses per quaternion conversion (its temporaries stay small)
_ROTATION_ROWS = [0, 1, 2, 4, 5, 6, 8, 9, 10]  # R[i, j] of a pose's 16 entries (row-major)
_ENCODED = {name: name.encode() for name in ("camera", *JOINTS)}  # HDF5 link names
TEXT_ATTRS = (
    "task",
    "llm_description",
    "llm_description2",
    "which_llm_description",
    "llm_type",
    "llm_verbs",
    "llm_objects",
    "environment",
    "object",
    "session_name",
)
CHARACTERISTICS = ("environment", "object", "session_name", "llm_type", "llm_verbs", "llm_objects")


def read_egodex(files: CaptureFiles, marker: Mapping[str, Any]) -> Trajectory:
    """Read an ``egodex`` capture folder into the canonical `Trajectory` (see module doc).

    Raises:
        CaptureFormatError: malformed input, naming capture, file, field (the HDF5
            dataset or attribute) and row (1-based frame).
    """
    poses, confidence, intrinsic, attrs = _read_hdf5(files)
    n = poses.shape[1]
    video = head_video(files, VIDEO_FILE, n, "transforms", fps=FPS, short_by=VIDEO_SHORT_BY)
    entries = np.ascontiguousarray(poses.reshape(-1, 16).T)  # (16, (J+1) N): row 4 i + j
    finite_flat = np.isfinite(entries).all(axis=0)
    finite = finite_flat.reshape(poses.shape[:2])  # (J+1, N)
    _check_rigid(files, entries, finite_flat, n)
    quats = _quaternions(entries, finite_flat).reshape(*finite.shape, 4)
    positions = poses[..., :3, 3].astype(np.float64)
    ts = video.timestamp_ns
    base = {**video.attrs, "source_file": HDF5_FILE}
    index = {name: i for i, name in enumerate(("camera", *JOINTS))}

    def pose_stream(name: str, joint: str) -> Stream:
        j = index[joint]
        fields = {"position": positions[j], "rotation": quats[j], "valid": finite[j]}
        return make_stream(name, "pose", ts, 0, fields, {**base, "frame": "world"})

    streams = [pose_stream("head", "camera")]
    for side in SIDES:
        streams.append(_hand_stream(side, ts, positions, quats, finite, confidence, index, base))
    streams.extend(pose_stream(f"body_{joint}", joint) for joint in BODY_JOINTS)
    world_to_camera = np.full((n, 4, 4), np.nan)
    world_to_camera[finite[0]] = np.linalg.inv(poses[0][finite[0]].astype(np.float64))
    streams.append(video.frames_stream(intrinsic, world_to_camera, "arkit", HDF5_FILE))
    quirks = video.quirks()
    if confidence is None:
        quirks.append(Quirk(HDF5_FILE, "no confidences group: confidence absent", 0, "confidences"))
    _, original, refs = imported_from(files)
    parts = original.split("/")
    language, instructions = _descriptions(files, attrs)
    info = CaptureInfo(
        capture_id=files.capture,
        source_kind="egodex",
        source_version="egodex/hdf5",
        start_ns=0,
        clock="device",
        source_capture_id=original,
        device="Apple Vision Pro",
        modality="visionpro",
        title=attrs.get("task", ""),
        world_frame="arkit_origin",
        handedness="right",
        up_axis="Y",
        dataset_name="egodex",
        split=parts[0] if len(parts) >= 3 else "",
        cameras=video.cameras(intrinsic),
        characteristics=tuple(
            Characteristic(name, "known", attrs[name])
            if name in attrs
            else Characteristic(name, "unknown")
            for name in CHARACTERISTICS
        ),
    )
    known = {MARKER_FILE, HDF5_FILE, VIDEO_FILE, PROVENANCE_FILE}
    return Trajectory(
        info=info,
        streams=tuple(streams),
        annotations=Annotations(instructions=instructions, language=language),
        media=(video.media(),),
        files=(FileRef("egodex_hdf5", HDF5_FILE, "application/x-hdf5"), *refs),
        extra_files=tuple(p for p in files.list_files() if p not in known),
        quirks=tuple(quirks),
    )


def _read_hdf5(
    files: CaptureFiles,
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray, dict[str, str]]:
    """(1 + 68, N, 4, 4) float32 poses (camera first, then `JOINTS`), (68, N) float64 confidences
    or None, the 3x3 intrinsic and the text attributes; every shape checked before reading."""
    path = files.path(HDF5_FILE)
    try:
        f = h5py.File(path, "r")
    except OSError as exc:
        raise files.error(HDF5_FILE, f"not a readable HDF5 file: {exc}") from None
    with f:
        poses = _read_stack(files, _group(files, f, "transforms"), "camera", *JOINTS)
        n = poses.shape[1]
        confidence = None
        if f.get("confidences") is not None:
            stack = _read_stack(files, _group(files, f, "confidences"), *JOINTS, n=n)
            confidence = stack.astype(np.float64)
        cam_group = _group(files, f, "camera")
        k_ds = _dataset(files, cam_group, "camera", "intrinsic")
        if k_ds.shape != (3, 3):
            raise files.error(
                HDF5_FILE, f"shape {k_ds.shape}, expected (3, 3)", field="camera/intrinsic"
            )
        intrinsic = np.asarray(k_ds[()], dtype=np.float64)
        if not np.isfinite(intrinsic).all() or intrinsic[0, 0] <= 0 or intrinsic[1, 1] <= 0:
            raise files.error(
                HDF5_FILE,
                "needs finite values and positive focal lengths",
                field="camera/intrinsic",
            )
        attrs = {k: _text(files, v, k) for k, v in f.attrs.items() if k in TEXT_ATTRS}
    return poses, confidence, intrinsic, attrs


def _group(files: CaptureFiles, f: h5py.File, name: str) -> h5py.Group:
    group = f.get(name)
    if group is None:
        raise files.error(HDF5_FILE, "group is missing", field=name)
    if not isinstance(group, h5py.Group):
        raise files.error(HDF5_FILE, "is not a group", field=name)
    return group


def _dataset(files: CaptureFiles, group: h5py.Group, where: str, name: str) -> h5py.Dataset:
    field = f"{where}/{name}"
    ds = group.get(name)
    if ds is None:
        raise files.error(HDF5_FILE, "dataset is missing", field=field)
    if not isinstance(ds, h5py.Dataset) or ds.dtype.kind != "f":
        raise files.error(HDF5_FILE, "is not a floating-point dataset", field=field)
    return ds


def _read_stack(
    files: CaptureFiles, group: h5py.Group, *names: str, n: int | None = None
) -> np.ndarray:
    """(len(names), N, ...) float32: one float dataset per name of ``group``, each checked
    for its type and shape ((N, 4, 4) poses, (N,) confidences) before it is read into the
    stack (the bounds of a shape are checked once, for the first dataset that has it).

    Uses HDF5's low-level open and read: a high-level ``Dataset`` costs more than reading
    a 300-frame pose. Returned as float32, EgoDex's type (HDF5 converts any other float
    type); callers widen what they keep (numpy's conversion is several times faster than
    HDF5's).
    """
    where = group.name.strip("/")
    per_frame: tuple[int, ...] = (4, 4) if where == "transforms" else ()
    gid, full = group.id, h5py.h5s.ALL
    out = np.empty(0, np.float32)
    checked: tuple[int, ...] | None = None  # the shape every dataset has, once one passed
    for i, name in enumerate(names):
        try:
            dsid = h5py.h5d.open(gid, _ENCODED[name])
        except KeyError:
            reason = "is not a dataset" if name in group else "dataset is missing"
            raise files.error(HDF5_FILE, reason, field=f"{where}/{name}") from None
        if dsid.get_type().get_class() != h5py.h5t.FLOAT:  # cheaper than building a dtype
            raise files.error(
                HDF5_FILE, f"dtype {dsid.dtype} is not floating-point", field=f"{where}/{name}"
            )
        shape = dsid.shape
        if shape != checked:
            n = _frames(files, f"{where}/{name}", shape, per_frame, n)
            checked = (n, *per_frame)
            if i == 0:
                out = np.empty((len(names), n, *per_frame), np.float32)
        dsid.read(full, full, out[i], _FLOAT32)
    return out


def _frames(
    files: CaptureFiles,
    field: str,
    shape: tuple[int, ...],
    per_frame: tuple[int, ...],
    n: int | None = None,
) -> int:
    """The frame count of a (N, *per_frame) dataset, checked against ``n`` when given."""
    if len(shape) != 1 + len(per_frame) or tuple(shape[1:]) != per_frame:
        want = ", ".join(("N", *map(str, per_frame)))
        raise files.error(HDF5_FILE, f"shape {shape}, expected ({want})", field=field)
    if n is not None and shape[0] != n:
        raise files.error(
            HDF5_FILE, f"has {shape[0]} frames, transforms/camera has {n}", field=field
        )
    if not 1 <= shape[0] <= MAX_FRAMES:
        raise files.error(HDF5_FILE, f"{shape[0]} frames; expected 1 to {MAX_FRAMES}", field=field)
    return int(shape[0])


def _check_rigid(files: CaptureFiles, entries: np.ndarray, finite: np.ndarray, n: int) -> None:
    """Every finite pose is rigid: bottom row 0 0 0 1, orthonormal rotation, det +1.

    ``entries``: (16, P) float32, entry (i, j) of pose ``p`` at ``[4 i + j, p]`` (poses in
    ``("camera", *JOINTS)`` order, ``n`` frames each); ``finite``: (P,). Written out per
    matrix entry on contiguous rows: numpy's batched 3x3 products and determinants are ten
    times slower on small matrices.
    """
    r = [[entries[4 * i + j] for j in range(3)] for i in range(3)]  # r[i][j] = R[i, j]
    err = np.abs(entries[12:16] - np.array([[0.0], [0.0], [0.0], [1.0]], entries.dtype)).max(axis=0)
    for j, k in ((0, 0), (1, 1), (2, 2), (0, 1), (0, 2), (1, 2)):
        gram = r[0][j] * r[0][k] + r[1][j] * r[1][k] + r[2][j] * r[2][k]
        err = np.maximum(err, np.abs(gram - float(j == k)))
    (a, b, c), (d, e, f), (g, h, i) = r
    det = a * (e * i - f * h) - b * (d * i - f * g) + c * (d * h - e * g)
    with np.errstate(invalid="ignore"):  # NaN poses: kept, flagged by the streams
        bad = finite & ((err > RIGID_TOLERANCE) | (det < 0))
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        j, frame = divmod(first, n)
        name = ("camera", *JOINTS)[j]
        raise files.error(
            HDF5_FILE,
            f"not a rigid transform (max |R^T R - I|, |bottom row - 0 0 0 1| = {err[first]:.3g};"
            f" tolerance {RIGID_TOLERANCE}; {int(bad.sum())} such poses)",
            field=f"transforms/{name}",
            row=frame + 1,
        )


def _quaternions(entries: np.ndarray, finite: np.ndarray) -> np.ndarray:
    """(P, 4) float64 scalar-last quaternions of the poses in ``entries`` ((16, P), as
    `_check_rigid` takes them), NaN where ``finite`` (P,) is False.

    The poses are rigid within `RIGID_TOLERANCE` (`_check_rigid`), so scipy converts
    without orthogonalizing (an SVD per pose). It gets contiguous float64 blocks of
    `_BLOCK` poses (a float32 or strided input costs it several times more; one block of
    all poses costs more in fresh memory pages than the conversion itself), non-finite
    poses replaced by the identity and their quaternions set to NaN after.
    """
    quats = np.empty((finite.size, 4))
    missing = ~finite
    any_missing = bool(missing.any())
    for start in range(0, finite.size, _BLOCK):
        stop = min(start + _BLOCK, finite.size)
        block = entries[_ROTATION_ROWS, start:stop].T.astype(np.float64, order="C")
        block = block.reshape(-1, 3, 3)
        if any_missing:
            block[missing[start:stop]] = np.eye(3)
        quats[start:stop] = Rotation.from_matrix(block, assume_valid=True).as_quat()
    if any_missing:
        quats[missing] = np.nan
    return quats


def _hand_stream(
    side: str,
    ts: np.ndarray,
    positions: np.ndarray,
    quats: np.ndarray,
    finite: np.ndarray,
    confidence: np.ndarray | None,
    index: Mapping[str, int],
    base: Mapping[str, AttrValue],
) -> Stream:
    """``hand_<side>_world``: arkit27, EgoDex joints 0-24, forearm joints NaN and invalid."""
    n = len(ts)
    rows = [index[f"{side}{h}"] for h in HAND]
    pos = np.full((n, len(ARKIT27), 3), np.nan)
    rot = np.full((n, len(ARKIT27), 4), np.nan)
    valid = np.zeros((n, len(ARKIT27)), bool)
    pos[:, :25] = positions[rows].transpose(1, 0, 2)
    rot[:, :25] = quats[rows].transpose(1, 0, 2)
    valid[:, :25] = finite[rows].T
    fields = {
        "position": pos,
        "rotation": rot,
        "joint_valid": valid,
        "hand_valid": valid[:, 0].copy(),
    }
    if confidence is not None:
        conf = np.full((n, len(ARKIT27)), np.nan)
        conf[:, :25] = confidence[[r - 1 for r in rows]].T  # confidences skip the camera
        fields["joint_confidence"] = conf
    attrs = {**base, "joint_set": "arkit27", "hand": side, "frame": "world"}
    return make_stream(f"hand_{side}_world", "hand_joints", ts, 0, fields, attrs)


def _text(files: CaptureFiles, value: Any, name: str) -> str:
    """An attribute as text: str, bytes or a 1-element array of them; NUL padding dropped."""
    if isinstance(value, np.ndarray):
        if value.dtype.kind == "u" and value.ndim == 1 and value.itemsize == 1:
            value = value.tobytes()
        elif value.size == 1:
            value = value.reshape(()).item()
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bytes):
        try:
            value = value.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise files.error(
                HDF5_FILE, f"bytes are not UTF-8 (offset {exc.start})", field=name
            ) from None
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        raise files.error(HDF5_FILE, f"expected text, got {type(value).__name__}", field=name)
    return value.split("\x00", 1)[0].strip()


def _descriptions(files: CaptureFiles, attrs: Mapping[str, str]) -> tuple[str, tuple[str, ...]]:
    """(language, instructions): the correct LLM description first, then the other."""
    texts = [attrs[k] for k in ("llm_description", "llm_description2") if attrs.get(k)]
    which = attrs.get("which_llm_description", "1") or "1"
    if which not in ("1", "2"):
        raise files.error(
            HDF5_FILE, f"must be 1 or 2, got {which!r}", field="which_llm_description"
        )
    chosen = attrs.get("llm_description2" if which == "2" else "llm_description", "")
    if not chosen:
        return (texts[0] if texts else ""), tuple(texts)
    return chosen, (chosen, *(t for t in texts if t != chosen))
