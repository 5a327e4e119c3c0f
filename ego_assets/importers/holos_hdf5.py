"""Holos HDF5 in (``kind = holos-hdf5``): every ``/data/demo_*`` of a file is one capture.

A source is one ``.h5``/``.hdf5`` file or a folder of them (searched recursively, in
sorted order). Each demo lands as a ``holos_hdf5`` capture (`ego_assets.capture.holos_hdf5`):

* ``capture.h5``: the source file byte for byte when it holds one demo; otherwise a file
  of that demo alone: the root attributes and root datasets (label axes), ``/data``
  attributes, the demo group (``h5py`` copy: values, filters and attributes unchanged),
  ``/mask`` entries naming it, and ``/holos`` and ``/media`` only for ``demo_0`` of a
  Holos file (the format's one demo; a robomimic file with many demos has neither);
* ``media/<name><ext>``: the bytes of each ``/media/<name>`` opaque dataset;
* ``metadata/<role>.json``: each verbatim JSON text (session metadata, calibration,
  task specification, procedure steps), as UTF-8.

The episode's path (provenance, capture key) is ``<file>/data/<demo>``. A file that is
not HDF5 or has no demo is one error naming it; the other files still land. Sources are
local folders (h5py reads files).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np

from ego_assets.capture.holos_hdf5 import H5_FILE, media_file, metadata_file, metadata_texts
from ego_assets.importers.core import CutImporter, Derived, EpisodeImportError

KIND = "holos-hdf5"
MARKER_KIND = "holos_hdf5"
SUFFIXES = (".h5", ".hdf5")
_PER_FILE_GROUPS = ("holos", "media")


@dataclass(frozen=True, slots=True)
class HolosDemo:
    """One demo of a source file.

    Attributes:
        file: the source file.
        rel: its path relative to the source root (POSIX), for provenance.
        demo: the demo group's name (``demo_0``...).
        demos: how many demos the file holds.
    """

    file: Path
    rel: str
    demo: str
    demos: int

    @property
    def episode_id(self) -> str:
        return f"{self.rel}/data/{self.demo}"

    def write(self, out: Path) -> Derived:
        """Write the capture's files (not the marker) into the empty folder ``out``."""
        return write_demo(self, Path(out))


def source_files(src: Path) -> list[tuple[Path, str]]:
    """(file, relative path) of every HDF5 file of ``src`` (a file or a folder)."""
    src = Path(src)
    if src.is_file():
        return [(src, src.name)]
    return [
        (p, p.relative_to(src).as_posix())
        for p in sorted(src.rglob("*"))
        if p.suffix.lower() in SUFFIXES and p.is_file()
    ]


def list_demos(file: Path, rel: str) -> list[HolosDemo]:
    """The demos of one file, in numeric order.

    Raises:
        EpisodeImportError: not an HDF5 file, or no ``/data/demo_*`` group.
    """
    try:
        with h5py.File(file, "r") as f:
            data = f.get("data")
            names = (
                [k for k in data if k.startswith("demo_")] if isinstance(data, h5py.Group) else []
            )
    except OSError as exc:
        raise EpisodeImportError(KIND, rel, rel, f"not a readable HDF5 file ({exc})") from None
    if not names:
        raise EpisodeImportError(KIND, rel, rel, "no /data/demo_* group", field="/data")
    names.sort(key=lambda n: (len(n), n))
    return [HolosDemo(file, rel, n, len(names)) for n in names]


def iter_demos(src: Path) -> Iterator[HolosDemo | EpisodeImportError]:
    """Every demo of every file of ``src``; a file that fails yields its error instead."""
    for file, rel in source_files(src):
        try:
            yield from list_demos(file, rel)
        except EpisodeImportError as exc:
            yield exc


class HolosHdf5Importer(CutImporter):
    """``ego-assets import holos-hdf5 SRC``: every demo of every HDF5 file of SRC."""

    kind = KIND
    capture_kind = MARKER_KIND
    dataset = KIND
    licence = "not stated by the source (no licence file beside the HDF5 files)"

    def items(self, root: Path) -> Iterator[HolosDemo | EpisodeImportError]:
        return iter_demos(root)


def write_demo(demo: HolosDemo, out: Path) -> Derived:
    """Land one demo into ``out`` (see the module docstring); what each file came from."""
    target = out / H5_FILE
    made: Derived = {}
    if demo.demos == 1:
        shutil.copyfile(demo.file, target)
        made[H5_FILE] = (demo.rel, "")
    else:
        _copy_one_demo(demo, target)
        how = f"/data/{demo.demo} alone, with the root attributes and label axes (h5py copy)"
        made[H5_FILE] = (demo.rel, how)
    with h5py.File(target, "r") as f:
        media = f.get("media")
        for name, ds in media.items() if isinstance(media, h5py.Group) else ():
            if isinstance(ds, h5py.Dataset) and ds.dtype.kind == "V":
                tid = ds.id.get_type()
                path = out / media_file(name, tid.get_tag().decode("ascii"))
                path.parent.mkdir(parents=True, exist_ok=True)
                buf = np.empty(ds.shape, dtype=f"V{tid.get_size()}")
                if ds.size:
                    ds.id.read(h5py.h5s.ALL, h5py.h5s.ALL, buf, mtype=tid)
                path.write_bytes(buf.tobytes())
                made[path.relative_to(out).as_posix()] = (demo.rel, f"bytes of /media/{name}")
        for dataset, role in metadata_texts(f):
            text = f[dataset][()]
            path = out / metadata_file(role)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(text if isinstance(text, bytes) else str(text).encode("utf-8"))
            made[metadata_file(role)] = (demo.rel, f"the text of {dataset} (UTF-8)")
    return made


def _copy_one_demo(demo: HolosDemo, target: Path) -> None:
    with h5py.File(demo.file, "r") as src, h5py.File(target, "w") as dst:
        for key, value in src.attrs.items():
            dst.attrs[key] = value
        holos_demo = demo.demo == "demo_0"
        for name, node in src.items():
            if name in ("data", "mask"):
                continue
            if isinstance(node, h5py.Dataset) or (holos_demo and name in _PER_FILE_GROUPS):
                src.copy(node, dst, name=name)
        data = dst.create_group("data")
        for key, value in src["data"].attrs.items():
            data.attrs[key] = value
        src.copy(src["data"][demo.demo], data, name=demo.demo)
        data.attrs["total"] = np.int64(src["data"][demo.demo].attrs.get("num_samples", 0))
        mask = src.get("mask")
        if isinstance(mask, h5py.Group):
            out = dst.create_group("mask")
            for key, ds in mask.items():
                names = [v.decode() if isinstance(v, bytes) else str(v) for v in ds[...]]
                if demo.demo in names:
                    out.create_dataset(key, data=[demo.demo], dtype=h5py.string_dtype())
