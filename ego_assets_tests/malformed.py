"""A corpus of malformed captures: each case breaks one small synthetic capture one way.

Used by ``test_malformed_corpus.py`` (every case: one clear error naming the file and
the problem, nothing written) and by ``python -m bench malformed`` (memory and time
per case). The base captures are 1-second synthetic ones of every kind
(`ego_assets.synth`) and the packaged Aria MPS sample; after a mutation the marker is
written again, as an uploader that wrote the broken file would have, so that what is
tested is the reader, not the marker check.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import shutil
import struct
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ego_assets.capture.manifest import write_marker
from ego_assets.fixtures import real_fixture

KINDS = ("holos-visionpro", "holos-iphone", "webxr", "mano-video", "aria-mps")
MARKER_KINDS = {
    "holos-visionpro": "holos",
    "holos-iphone": "holos",
    "webxr": "webxr",
    "mano-video": "mano_video",
    "aria-mps": "aria_mps",
}
ARIA_FILES = (
    "hand_tracking_results_v1.csv",
    "hand_tracking_results_v2.csv",
    "wrist_and_palm_poses.csv",
    "summary.json",
)
# the classes of format break (issue 8) plus the corpus' own
CLASSES = {
    "int-range": "integer beyond int64 or float beyond range in a clock or slot field",
    "non-finite-origin": "NaN or infinite clock origin",
    "absurd-time": "finite time outside the clock's plausible range",
    "non-utf8": "bytes that are not UTF-8 in JSON, JSON Lines or CSV",
    "deep-json": "JSON nested too deeply",
    "symlink-loop": "symlink loop",
    "wav-header": "corrupt WAV header",
    "npz-size": ".npz header claiming a huge array, or a compressed bomb",
    "csv-bom": "UTF-8 byte-order mark at the start of a CSV (accepted)",
    "frames-vs-video": "frames table listing more frames than the video holds",
    "other": "truncation, wrong file type, broken archive, out-of-range number",
}


Mutation = Callable[[Path], None]


@dataclass(frozen=True, slots=True)
class Case:
    """One malformed capture.

    Attributes:
        name: unique case id (also the capture key).
        kind: base capture kind (`KINDS`).
        klass: class of format break (`CLASSES`).
        file: the file the error must name (relative path).
        problem: text the error must contain (``""`` when the capture is accepted).
        mutate: breaks the copied capture in place.
        reseal: rewrite the marker after the mutation.
    """

    name: str
    kind: str
    klass: str
    file: str
    problem: str
    mutate: Mutation
    reseal: bool = True

    @property
    def accepted(self) -> bool:
        return not self.problem


# ---- building the base captures -------------------------------------------------------


def make_base(kind: str, folder: Path) -> Path:
    """A small clean capture of ``kind`` in ``folder`` (1 s synthetic, or the Aria sample)."""
    if kind == "aria-mps":
        folder.mkdir(parents=True)
        for name in ARIA_FILES:
            shutil.copyfile(real_fixture("aria_mps_hand_tracking") / name, folder / name)
        write_marker(folder, "aria_mps")
        return folder
    from ego_assets.synth import synthesize

    return synthesize(kind, folder, seconds=1.0, seed=7, depth=kind == "mano-video")


def prepare(case: Case, bases: dict[str, Path], root: Path) -> Path:
    """Copy the base capture of ``case`` to ``root/<case.name>`` and break it."""
    folder = root / case.name
    shutil.copytree(bases[case.kind], folder, symlinks=True)
    case.mutate(folder)
    if case.reseal:
        write_marker(folder, MARKER_KINDS[case.kind])
    return folder


def run_convert(capture: Path, out: Path) -> tuple[int, str]:
    """``ego-assets convert capture out``: exit code and what it wrote to stderr."""
    from ego_assets.cli import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["convert", str(capture), str(out)])
    return code, err.getvalue()


# ---- mutations ------------------------------------------------------------------------


def replace_text(rel: str, old: str, new: str) -> Mutation:
    """Replace the first ``old`` in ``rel`` by ``new`` (``old`` must be there)."""

    def mutate(folder: Path) -> None:
        text = (folder / rel).read_text()
        if old not in text:
            raise AssertionError(f"{old!r} not in {rel}")
        (folder / rel).write_text(text.replace(old, new, 1))

    return mutate


def set_json(rel: str, path: tuple[str | int, ...], raw: str) -> Mutation:
    """Set the value at ``path`` in JSON file ``rel`` to the literal JSON text ``raw``."""

    def mutate(folder: Path) -> None:
        doc = json.loads((folder / rel).read_text())
        target = doc
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = "@@RAW@@"
        text = json.dumps(doc, indent=1).replace('"@@RAW@@"', raw)
        (folder / rel).write_text(text)

    return mutate


def set_jsonl(rel: str, line: int, path: tuple[str | int, ...], raw: str) -> Mutation:
    """Set the value at ``path`` of JSON Lines record ``line`` (1-based) to ``raw``."""

    def mutate(folder: Path) -> None:
        lines = (folder / rel).read_text().splitlines()
        record = json.loads(lines[line - 1])
        target = record
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = "@@RAW@@"
        lines[line - 1] = json.dumps(record).replace('"@@RAW@@"', raw)
        (folder / rel).write_text("\n".join(lines) + "\n")

    return mutate


def set_csv(rel: str, row: int, column: str, value: str) -> Mutation:
    """Set ``column`` of 1-based data ``row`` of CSV ``rel`` to the text ``value``."""

    def mutate(folder: Path) -> None:
        lines = (folder / rel).read_text().splitlines()
        col = lines[0].split(",").index(column)
        cells = lines[row].split(",")
        cells[col] = value
        lines[row] = ",".join(cells)
        (folder / rel).write_text("\n".join(lines) + "\n")

    return mutate


def append_rows(rel: str, n: int) -> Mutation:
    """Repeat the last data row of CSV ``rel`` ``n`` more times."""

    def mutate(folder: Path) -> None:
        lines = (folder / rel).read_text().splitlines()
        (folder / rel).write_text("\n".join(lines + [lines[-1]] * n) + "\n")

    return mutate


def patch_bytes(rel: str, offset: int, data: bytes) -> Mutation:
    """Overwrite ``rel`` at ``offset`` (negative: from the end) with ``data``."""

    def mutate(folder: Path) -> None:
        raw = bytearray((folder / rel).read_bytes())
        start = offset if offset >= 0 else len(raw) + offset
        raw[start : start + len(data)] = data
        (folder / rel).write_bytes(bytes(raw))

    return mutate


def insert_bytes(rel: str, needle: bytes, data: bytes) -> Mutation:
    """Insert ``data`` right after the first ``needle`` in ``rel``."""

    def mutate(folder: Path) -> None:
        raw = (folder / rel).read_bytes()
        at = raw.index(needle) + len(needle)
        (folder / rel).write_bytes(raw[:at] + data + raw[at:])

    return mutate


def prefix_bom(rel: str) -> Mutation:
    return insert_bytes(rel, b"", b"\xef\xbb\xbf")


def truncate(rel: str, keep: int) -> Mutation:
    def mutate(folder: Path) -> None:
        raw = (folder / rel).read_bytes()
        (folder / rel).write_bytes(raw[:keep])

    return mutate


def nest(rel: str, depth: int) -> Mutation:
    """Replace JSON document ``rel`` by a list nested ``depth`` levels deep."""

    def mutate(folder: Path) -> None:
        (folder / rel).write_text("[" * depth + "]" * depth)

    return mutate


def nest_line(rel: str, line: int, depth: int) -> Mutation:
    def mutate(folder: Path) -> None:
        lines = (folder / rel).read_text().splitlines()
        lines[line - 1] = "[" * depth + "]" * depth
        (folder / rel).write_text("\n".join(lines) + "\n")

    return mutate


def symlink_loop(rel: str) -> Mutation:
    """Make ``rel`` a symlink to itself (replacing the file if there is one)."""

    def mutate(folder: Path) -> None:
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        os.symlink(path.name, path)

    return mutate


def add_file(name: bytes) -> Mutation:
    """Add a small file whose name is the raw bytes ``name``."""

    def mutate(folder: Path) -> None:
        with open(os.path.join(os.fsencode(folder), name), "wb") as fh:
            fh.write(b"x\n")

    return mutate


def make_folder(rel: str) -> Mutation:
    def mutate(folder: Path) -> None:
        (folder / rel).unlink()
        (folder / rel).mkdir()
        (folder / rel / "x").write_text("x")

    return mutate


def wav_data_size(rel: str, size: int) -> Mutation:
    """Declare ``size`` bytes in the ``data`` chunk header of WAV ``rel``."""

    def mutate(folder: Path) -> None:
        raw = bytearray((folder / rel).read_bytes())
        at = raw.index(b"data") + 4
        raw[at : at + 4] = struct.pack("<I", size)
        (folder / rel).write_bytes(bytes(raw))

    return mutate


def _npy_header(shape: tuple[int, ...], descr: str = "<f8") -> bytes:
    buf = io.BytesIO()
    header = {"descr": descr, "fortran_order": False, "shape": shape}
    np.lib.format.write_array_header_1_0(buf, header)
    return np.lib.format.MAGIC_PREFIX + b"\x01\x00" + buf.getvalue()[8:]


def _rewrite_npz(path: Path, name: str, write: Callable[[zipfile.ZipFile], None]) -> None:
    """Rewrite ``path`` with member ``name.npy`` produced by ``write`` (others copied)."""
    tmp = path.with_suffix(".tmp")
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(tmp, "w") as dst:
        for info in src.infolist():
            if info.filename != f"{name}.npy":
                dst.writestr(info, src.read(info))
        write(dst)
    tmp.replace(path)


def npz_claims(rel: str, name: str, shape: tuple[int, ...]) -> Mutation:
    """Member ``name`` keeps a few bytes of data but its header declares ``shape``."""

    def mutate(folder: Path) -> None:
        def write(dst: zipfile.ZipFile) -> None:
            dst.writestr(f"{name}.npy", _npy_header(shape) + bytes(64))

        _rewrite_npz(folder / rel, name, write)

    return mutate


def npz_bomb(rel: str, name: str, shape: tuple[int, ...]) -> Mutation:
    """Member ``name`` really holds ``shape`` float32 zeros, deflated (a compressed bomb)."""

    def mutate(folder: Path) -> None:
        def write(dst: zipfile.ZipFile) -> None:
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(2020, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            chunk = bytes(1 << 20)
            total = math.prod(shape) * 4
            with dst.open(info, "w", force_zip64=True) as fh:
                fh.write(_npy_header(shape, "<f4"))
                for start in range(0, total, len(chunk)):
                    fh.write(chunk[: min(len(chunk), total - start)])

        _rewrite_npz(folder / rel, name, write)

    return mutate


def npz_header_length(rel: str, name: str, length: int) -> Mutation:
    """Member ``name`` whose .npy header says it is ``length`` bytes long."""

    def mutate(folder: Path) -> None:
        def write(dst: zipfile.ZipFile) -> None:
            dst.writestr(f"{name}.npy", b"\x93NUMPY\x01\x00" + struct.pack("<H", length) + b"{")

        _rewrite_npz(folder / rel, name, write)

    return mutate


def corrupt_member(rel: str, name: str) -> Mutation:
    """Flip bytes inside the stored data of member ``name`` (the CRC no longer matches)."""

    def mutate(folder: Path) -> None:
        path = folder / rel
        with zipfile.ZipFile(path) as archive:
            info = archive.getinfo(f"{name}.npy")
        raw = bytearray(path.read_bytes())
        # local header: 30 bytes + name + extra; data follows
        name_len, extra_len = struct.unpack(
            "<HH", raw[info.header_offset + 26 : info.header_offset + 30]
        )
        data_at = info.header_offset + 30 + name_len + extra_len
        middle = data_at + info.compress_size // 2
        raw[middle : middle + 8] = bytes(b ^ 0xFF for b in raw[middle : middle + 8])
        path.write_bytes(bytes(raw))

    return mutate


# ---- the cases ------------------------------------------------------------------------

HV, HI, WX, MV, AR = KINDS
BIG = str(2**64)
INT64_MIN = str(-(2**63))
INT64_OVER = str(2**63)
HUGE_INT = "9" * 30


def _cases() -> list[Case]:
    c = Case
    meta = "metadata.json"
    cases = [
        # ---- holos: Apple Vision Pro
        c(
            "hv-origin-2p64",
            HV,
            "int-range",
            meta,
            "does not fit in 64 bits",
            set_json(meta, ("clock", "mono_origin_epoch_ns"), BIG),
        ),
        c(
            "hv-start-nan",
            HV,
            "non-finite-origin",
            meta,
            "not finite",
            set_json(meta, ("clock", "capture_start_mono_s"), "NaN"),
        ),
        c(
            "hv-start-neg-inf",
            HV,
            "non-finite-origin",
            meta,
            "not finite",
            set_json(meta, ("clock", "capture_start_mono_s"), "-Infinity"),
        ),
        c(
            "hv-origin-int64-min",
            HV,
            "absurd-time",
            meta,
            "outside the plausible Unix time",
            set_json(meta, ("clock", "mono_origin_epoch_ns"), INT64_MIN),
        ),
        c(
            "hv-pose-time-1e15",
            HV,
            "absurd-time",
            "device_pose.csv",
            "time 1e+15 s is outside the plausible device uptime",
            set_csv("device_pose.csv", 5, "t_mono_s", "1e15"),
        ),
        c(
            "hv-hand-flag-huge",
            HV,
            "int-range",
            "hands/left.csv",
            "invalid value",
            set_csv("hands/left.csv", 3, "hand_tracked", HUGE_INT),
        ),
        c(
            "hv-frame-index-2p64",
            HV,
            "int-range",
            "media/camera_left_frames.csv",
            "invalid value",
            set_csv("media/camera_left_frames.csv", 2, "frame_index", BIG),
        ),
        c(
            "hv-vlm-time-1e300",
            HV,
            "absurd-time",
            "vlm/outputs.json",
            "outside the plausible device uptime",
            set_json("vlm/outputs.json", (0, "t_mono"), "1e300"),
        ),
        c(
            "hv-transcript-latin1",
            HV,
            "non-utf8",
            "transcript.json",
            "not UTF-8",
            insert_bytes("transcript.json", b'"text": "', b"caf\xe9 "),
        ),
        c(
            "hv-transcript-surrogate",
            HV,
            "non-utf8",
            "transcript.json",
            "unpaired surrogate escape",
            set_json("transcript.json", ("segments", 0, "text"), '"a \\ud800 b"'),
        ),
        c(
            "hv-steps-nested-100k",
            HV,
            "deep-json",
            "events/procedure_steps.json",
            "nested deeper than 64",
            nest("events/procedure_steps.json", 100_000),
        ),
        c(
            "hv-stereo-nested-200",
            HV,
            "deep-json",
            "calibration/stereo.json",
            "nested deeper than 64",
            nest("calibration/stereo.json", 200),
        ),
        c(
            "hv-extra-symlink-loop",
            HV,
            "symlink-loop",
            "notes/loop",
            "symlink loop",
            symlink_loop("notes/loop"),
            reseal=False,
        ),
        c(
            "hv-wav-fmt-size",
            HV,
            "wav-header",
            "media/audio.wav",
            "corrupt WAV header",
            patch_bytes("media/audio.wav", 16, b"\xff"),
        ),
        c(
            "hv-wav-riff",
            HV,
            "wav-header",
            "media/audio.wav",
            "corrupt WAV header",
            patch_bytes("media/audio.wav", 0, b"RIFX"),
        ),
        c(
            "hv-wav-data-size",
            HV,
            "wav-header",
            "media/audio.wav",
            "data chunk declares 1000000000 bytes",
            wav_data_size("media/audio.wav", 10**9),
        ),
        c("hv-pose-bom", HV, "csv-bom", "device_pose.csv", "", prefix_bom("device_pose.csv")),
        c(
            "hv-frames-beyond-video",
            HV,
            "frames-vs-video",
            "media/camera_left_frames.csv",
            "lists 35 frames but media/camera_left.mov holds 30",
            append_rows("media/camera_left_frames.csv", 5),
        ),
        c(
            "hv-pose-truncated",
            HV,
            "other",
            "device_pose.csv",
            "malformed CSV",
            truncate("device_pose.csv", 3000),
        ),
        c(
            "hv-hands-folder",
            HV,
            "other",
            "hands/right.csv",
            "is a folder, not a file",
            make_folder("hands/right.csv"),
        ),
        c(
            "hv-name-newline",
            HV,
            "other",
            "notes\nmore.txt",
            "file name has a control character",
            add_file(b"notes\nmore.txt"),
        ),
        c(
            "hv-name-latin1",
            HV,
            "non-utf8",
            "caf\udce9.txt",
            "bytes that are not UTF-8",
            add_file(b"caf\xe9.txt"),
            reseal=False,  # a marker naming it would be refused first (not Unicode)
        ),
        c(
            "hv-stereo-1e400",
            HV,
            "int-range",
            "calibration/stereo.json",
            "not finite",
            set_json(
                "calibration/stereo.json",
                ("cameras", "camera_left", "camera_from_device", 3),
                "1e400",
            ),
        ),
        c(
            "hv-anchor-name-latin1",
            HV,
            "non-utf8",
            "objects/anchors.csv",
            "UTF8",
            insert_bytes("objects/anchors.csv", b",tab", b"\xff\xfe"),
        ),
        # ---- holos: iPhone
        c(
            "hi-imu-time-negative",
            HI,
            "absurd-time",
            "imu.csv",
            "time -1 s is outside the plausible device uptime",
            set_csv("imu.csv", 7, "t_mono_s", "-1"),
        ),
        c(
            "hi-imu-time-1e400",
            HI,
            "int-range",
            "imu.csv",
            "not finite",
            set_csv("imu.csv", 2, "t_mono_s", "1e400"),
        ),
        c(
            "hi-pose-time-int64-min",
            HI,
            "absurd-time",
            "device_pose.csv",
            "outside the plausible device uptime",
            set_csv("device_pose.csv", 1, "t_mono_s", INT64_MIN),
        ),
        c(
            "hi-metadata-latin1",
            HI,
            "non-utf8",
            meta,
            "not UTF-8",
            insert_bytes(meta, b'"title": "', b"\xe9t\xe9 "),
        ),
        c(
            "hi-frames-beyond-video",
            HI,
            "frames-vs-video",
            "media/camera_back_frames.csv",
            "lists 31 frames but media/camera_back.mov holds 30",
            append_rows("media/camera_back_frames.csv", 1),
        ),
        c(
            "hi-transcript-time-1e15",
            HI,
            "absurd-time",
            "transcript.json",
            "outside the plausible time since the capture start",
            set_json("transcript.json", ("segments", 0, "start_s"), "1e15"),
        ),
        c(
            "hi-landmarks-nul",
            HI,
            "other",
            "hands/left_landmarks.csv",
            "malformed CSV",
            patch_bytes("hands/left_landmarks.csv", 4000, b"\x00" * 40),
        ),
        c(
            "hi-origin-float",
            HI,
            "non-finite-origin",
            meta,
            "expected int, got float",
            set_json(meta, ("clock", "mono_origin_epoch_ns"), "Infinity"),
        ),
        c(
            "hi-origin-digits",
            HI,
            "int-range",
            meta,
            "malformed JSON",
            set_json(meta, ("clock", "mono_origin_epoch_ns"), "1" * 5000),
        ),
        # ---- webxr
        c(
            "wx-slot-2p70",
            WX,
            "int-range",
            "slots.jsonl",
            "is outside 0 to 1000000000",
            set_jsonl("slots.jsonl", 4, ("slot",), str(2**70)),
        ),
        c(
            "wx-t-ms-1e400",
            WX,
            "int-range",
            "slots.jsonl",
            "not finite",
            set_jsonl("slots.jsonl", 2, ("t_ms",), "1e400"),
        ),
        c(
            "wx-origin-nan",
            WX,
            "non-finite-origin",
            "session.json",
            "not finite",
            set_json("session.json", ("time_origin_epoch_ms",), "NaN"),
        ),
        c(
            "wx-origin-inf",
            WX,
            "non-finite-origin",
            "session.json",
            "not finite",
            set_json("session.json", ("time_origin_epoch_ms",), "Infinity"),
        ),
        c(
            "wx-origin-1e300",
            WX,
            "absurd-time",
            "session.json",
            "outside the plausible Unix time",
            set_json("session.json", ("time_origin_epoch_ms",), "1e300"),
        ),
        c(
            "wx-t-ms-1e15",
            WX,
            "absurd-time",
            "slots.jsonl",
            "outside the plausible time since the session origin",
            set_jsonl("slots.jsonl", 6, ("t_ms",), "1e15"),
        ),
        c(
            "wx-slots-bad-utf8",
            WX,
            "non-utf8",
            "slots.jsonl",
            "not UTF-8",
            insert_bytes("slots.jsonl", b'{"slot":2,', b'"note":"\xc3\x28",'),
        ),
        c(
            "wx-session-bad-utf8",
            WX,
            "non-utf8",
            "session.json",
            "not UTF-8",
            insert_bytes("session.json", b'"task": "', b"\x80"),
        ),
        c(
            "wx-slots-nested",
            WX,
            "deep-json",
            "slots.jsonl",
            "nested deeper than 64",
            nest_line("slots.jsonl", 2, 100_000),
        ),
        c(
            "wx-segments-nested",
            WX,
            "deep-json",
            "segments.json",
            "nested deeper than 64",
            nest("segments.json", 70),
        ),
        c(
            "wx-frames-slot-huge",
            WX,
            "int-range",
            "camera/frames.csv",
            "invalid value",
            set_csv("camera/frames.csv", 3, "slot", HUGE_INT),
        ),
        c(
            "wx-frames-beyond-video",
            WX,
            "frames-vs-video",
            "camera/frames.csv",
            "lists 32 frames but camera/outward.mp4 holds 30",
            append_rows("camera/frames.csv", 2),
        ),
        c(
            "wx-segment-slot-2p64",
            WX,
            "int-range",
            "segments.json",
            "outside 0 to 1000000000",
            set_json("segments.json", ("segments", 0, "start_slot"), BIG),
        ),
        c(
            "wx-rate-1e400",
            WX,
            "int-range",
            "session.json",
            "not finite",
            set_json("session.json", ("recorder_rate_hz",), "1e400"),
        ),
        c(
            "wx-rate-zero",
            WX,
            "other",
            "session.json",
            "0 is outside the plausible range 0.1 to 1000",
            set_json("session.json", ("recorder_rate_hz",), "0"),
        ),
        c(
            "wx-characteristic-nan",
            WX,
            "other",
            "session.json",
            "not finite",
            set_json("session.json", ("capture_characteristics", "frame_rate_hz", "value"), "NaN"),
        ),
        c(
            "wx-calibration-truncated",
            WX,
            "other",
            "calibration.json",
            "malformed JSON",
            truncate("calibration.json", 100),
        ),
        c(
            "wx-video-truncated",
            WX,
            "other",
            "camera/outward.mp4",
            "no video stream",
            truncate("camera/outward.mp4", 200),
        ),
        c(
            "wx-slots-symlink-loop",
            WX,
            "symlink-loop",
            "slots.jsonl",
            "symlink loop",
            symlink_loop("slots.jsonl"),
            reseal=False,
        ),
        c(
            "wx-joint-2p70",
            WX,
            "int-range",
            "slots.jsonl",
            "does not fit in 64 bits",
            set_jsonl("slots.jsonl", 1, ("left", "joints", 0, 0), str(2**70)),
        ),
        # ---- mano-video
        c(
            "mv-npz-claims-huge",
            MV,
            "npz-size",
            "mano.npz",
            "header declares",
            npz_claims("mano.npz", "trans", (2, 10**12, 3)),
        ),
        c(
            "mv-npz-bomb",
            MV,
            "npz-size",
            "mano.npz",
            "expected P = 15",
            npz_bomb("mano.npz", "hand_pose", (2, 30, 400_000)),
        ),
        c(
            "mv-npz-camera-claims",
            MV,
            "npz-size",
            "camera.npz",
            "header declares",
            npz_claims("camera.npz", "world_to_camera", (10**10, 4, 4)),
        ),
        c(
            "mv-npz-header-length",
            MV,
            "npz-size",
            "mano.npz",
            "unreadable .npy header",
            npz_header_length("mano.npz", "betas", 60_000),
        ),
        c(
            "mv-npz-crc",
            MV,
            "other",
            "mano.npz",
            "unreadable array",
            corrupt_member("mano.npz", "hand_pose"),
        ),
        c(
            "mv-depth-truncated",
            MV,
            "other",
            "depth.npz",
            "not a readable .npz file",
            truncate("depth.npz", 500),
        ),
        c(
            "mv-time-int64-min",
            MV,
            "absurd-time",
            "frames.csv",
            "outside the plausible Unix time",
            set_csv("frames.csv", 4, "timestamp_ns", INT64_MIN),
        ),
        c(
            "mv-time-int64-over",
            MV,
            "int-range",
            "frames.csv",
            "invalid value",
            set_csv("frames.csv", 2, "timestamp_ns", INT64_OVER),
        ),
        c(
            "mv-time-1970",
            MV,
            "absurd-time",
            "frames.csv",
            "outside the plausible Unix time",
            set_csv("frames.csv", 1, "timestamp_ns", "1000000000000000"),
        ),
        c(
            "mv-frames-beyond-video",
            MV,
            "frames-vs-video",
            "frames.csv",
            "lists 33 frames but video.mp4 holds 30",
            append_rows("frames.csv", 3),
        ),
        c(
            "mv-meta-latin1",
            MV,
            "non-utf8",
            "meta.json",
            "not UTF-8",
            insert_bytes("meta.json", b'"language": "', b"\xff"),
        ),
        c(
            "mv-meta-nested",
            MV,
            "deep-json",
            "meta.json",
            "nested deeper than 64",
            nest("meta.json", 5000),
        ),
        c(
            "mv-fps-1e400",
            MV,
            "other",
            "meta.json",
            "not finite",
            set_json("meta.json", ("fps",), "1e400"),
        ),
        c(
            "mv-n-pca-huge",
            MV,
            "int-range",
            "meta.json",
            "does not fit in 64 bits",
            set_json("meta.json", ("mano", "n_pca"), HUGE_INT),
        ),
        c(
            "mv-frame-index-negative",
            MV,
            "other",
            "frames.csv",
            "frame -3 is outside 0 to 2147483647",
            set_csv("frames.csv", 6, "frame_index", "-3"),
        ),
        c("mv-frames-bom", MV, "csv-bom", "frames.csv", "", prefix_bom("frames.csv")),
        # ---- aria-mps (the packaged MPS sample)
        c(
            "ar-time-1e15",
            AR,
            "absurd-time",
            "hand_tracking_results_v1.csv",
            "outside the plausible device uptime",
            set_csv("hand_tracking_results_v1.csv", 2, "tracking_timestamp_us", "1000000000000000"),
        ),
        c(
            "ar-time-int64-min",
            AR,
            "absurd-time",
            "wrist_and_palm_poses.csv",
            "outside the plausible device uptime",
            set_csv("wrist_and_palm_poses.csv", 1, "tracking_timestamp_us", INT64_MIN),
        ),
        c(
            "ar-time-huge",
            AR,
            "int-range",
            "hand_tracking_results_v2.csv",
            "invalid value",
            set_csv("hand_tracking_results_v2.csv", 3, "tracking_timestamp_us", HUGE_INT),
        ),
        c(
            "ar-results-bom",
            AR,
            "csv-bom",
            "hand_tracking_results_v2.csv",
            "",
            prefix_bom("hand_tracking_results_v2.csv"),
        ),
        c(
            "ar-summary-latin1",
            AR,
            "non-utf8",
            "summary.json",
            "not UTF-8",
            patch_bytes("summary.json", 3, b"\xe9"),
        ),
        c(
            "ar-summary-nested",
            AR,
            "deep-json",
            "summary.json",
            "nested deeper than 64",
            nest("summary.json", 65),
        ),
        c(
            "ar-results-symlink-loop",
            AR,
            "symlink-loop",
            "hand_tracking_results_loop.csv",
            "symlink loop",
            symlink_loop("hand_tracking_results_loop.csv"),
            reseal=False,
        ),
    ]
    return cases


CASES: tuple[Case, ...] = tuple(_cases())
