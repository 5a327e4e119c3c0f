"""Holos HDF5: files embedded verbatim, the thumbnail, the media and the decoded frames.

Part of the writer of `ego_assets.formats.holos_hdf5` (the format: docs/formats/holos-hdf5.md).
"""

from __future__ import annotations

import mimetypes
from pathlib import Path
from typing import Any

import numpy as np

from ego_assets.formats.holos_demo import DemoSection
from ego_assets.formats.holos_h5 import H5Writer, write_attrs
from ego_assets.formats.holos_writer import GZIP_LEVEL, ExportNotes, safe_name
from ego_assets.trajectory.model import Trajectory

# ------------------------------------------------------------------- files, media

# FileRef role -> where its verbatim JSON goes (other JSON roles: /holos/metadata/<role>)
_JSON_HOMES = {
    "session_metadata": "holos/metadata/session",
    "stereo_calibration": "holos/metadata/stereo_calibration",
    "procedure_steps": "holos/events/procedure_steps_json",
}
# parsed into typed datasets; the verbatim copy would say the same again
_PARSED_ROLES = ("transcript", "vlm")


def _thumbnail(writer: H5Writer, path: Path) -> None:
    from PIL import Image

    with Image.open(path) as img:
        rgb = np.asarray(img.convert("RGB"), dtype=np.uint8)
    group = writer.group("holos/metadata")
    ds = writer._create(group, "thumbnail", rgb)
    h, wd, c = rgb.shape
    dims = [
        writer.pure_dim(group, "thumbnail_y", h),
        writer.pure_dim(group, "thumbnail_x", wd),
        writer.pure_dim(group, "thumbnail_channel", c),
    ]
    writer.attach(ds, dims)
    writer.image_attrs(ds)
    writer.attrs(ds, long_name="capture thumbnail, RGB", units="1")


def write_files(
    writer: H5Writer, trajectory: Trajectory, raw_dir: Path, notes: ExportNotes
) -> None:
    roles = {f.role: f for f in trajectory.files}
    for ref in trajectory.files:
        if ref.role == "thumbnail":
            _thumbnail(writer, raw_dir / ref.path)
        elif ref.role in _PARSED_ROLES:
            continue
        elif ref.mime == "application/json":
            home = _JSON_HOMES.get(ref.role, f"holos/metadata/{safe_name(ref.role)}")
            parent, _, name = home.rpartition("/")
            text = (raw_dir / ref.path).read_text(encoding="utf-8")
            writer.text(writer.group(parent), name, text, source_file=ref.path, mime_type=ref.mime)
        else:
            _embed_file(writer, raw_dir, ref.path, ref.mime)
            notes.extras.append(ref.path)
    for role, home in (
        ("session_metadata", "session"),
        ("stereo_calibration", "stereo_calibration"),
    ):
        if role not in roles:
            notes.skip(f"holos/metadata/{home}", f"no {role} file")
    if "thumbnail" not in roles:
        notes.skip("holos/metadata/thumbnail", "no thumbnail")
    for rel in sorted(trajectory.extra_files):
        mime = mimetypes.guess_type(rel)[0] or "application/octet-stream"
        _embed_file(writer, raw_dir, rel, mime)
        notes.extras.append(rel)


def _embed_file(writer: H5Writer, raw_dir: Path, rel: str, mime: str) -> None:
    parts = [safe_name(p) for p in rel.split("/") if p]
    group = writer.group("/".join(["holos/files", *parts[:-1]]))
    ds = writer.opaque(group, parts[-1], raw_dir / rel, mime, None)
    writer.attrs(ds, source_file=rel)


def write_media(
    writer: H5Writer, trajectory: Trajectory, raw_dir: Path, notes: ExportNotes
) -> None:
    group = writer.group("media")
    for ref in trajectory.media:
        name = safe_name(ref.role)
        ds = writer.opaque(group, name, raw_dir / ref.path, ref.mime, f"{name}_bytes")
        attrs: dict[str, Any] = {"source_file": ref.path}
        if ref.kind == "audio":
            attrs["sample_rate_hz"] = np.int64(ref.sample_rate_hz)
            attrs["channels"] = np.int64(ref.channels)
            attrs["duration_s"] = np.float64(ref.duration_s)
        else:
            attrs["codec"] = ref.codec
            attrs["width"] = np.int64(ref.width)
            attrs["height"] = np.int64(ref.height)
            attrs["fps"] = np.float64(ref.fps)
            attrs["duration_s"] = np.float64(ref.duration_s)
            attrs["frame_count"] = np.int64(ref.frame_count)
            if ref.unit:
                attrs["unit"] = ref.unit
        write_attrs(ds, attrs.items())
    if not any(m.kind == "audio" for m in trajectory.media):
        notes.skip("media/audio", "no audio")
    if not any(m.kind == "video" for m in trajectory.media):
        notes.skip("media/<camera>", "no video")


def write_decoded_frames(
    writer: H5Writer,
    trajectory: Trajectory,
    raw_dir: Path,
    placed: dict[str, str],
    demo: DemoSection,
    notes: ExportNotes,
) -> None:
    """``/holos/raw/video/<camera>/frames`` uint8 [F, H, W, 3] (one frame per chunk) and
    ``obs/<camera>_frame_index``; rows follow the camera's frame timing stream."""
    import av

    for ref in trajectory.media:
        if ref.kind != "video":
            continue
        if ref.frames_stream is None or ref.role not in placed:
            notes.skip(f"holos/raw/video/{ref.role}/frames", "the video has no frame timing")
            continue
        frames = trajectory.stream(ref.frames_stream)
        group = writer.f[placed[ref.role]]
        wanted = np.asarray(frames.fields["frame_index"], dtype=np.int64)
        rows_of: dict[int, list[int]] = {}
        for row, index in enumerate(wanted.tolist()):
            rows_of.setdefault(index, []).append(row)
        with av.open(str(raw_dir / ref.path)) as container:
            stream = container.streams.video[0]
            h, wd = stream.codec_context.height, stream.codec_context.width
            dims = [
                group["time"],
                writer.pure_dim(group, "y", h),
                writer.pure_dim(group, "x", wd),
                writer.pure_dim(group, "channel", 3),
            ]
            ds = group.create_dataset(
                "frames",
                shape=(len(wanted), h, wd, 3),
                dtype=np.uint8,
                chunks=(1, h, wd, 3),
                compression="gzip",
                compression_opts=GZIP_LEVEL,
                shuffle=True,
                fletcher32=True,
            )
            for number, frame in enumerate(container.decode(stream)):
                for row in rows_of.get(number, ()):
                    ds[row] = frame.to_ndarray(format="rgb24")
        writer.attach(ds, dims)
        writer.image_attrs(ds)
        writer.attrs(
            ds, long_name=f"decoded {ref.role} frames, RGB, rows as the frame timing", units="1"
        )
        demo.frame_index(safe_name(ref.role), frames)
