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
