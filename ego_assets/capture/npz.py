"""Arrays from an untrusted NumPy ``.npz`` whose headers never decide the memory used.

`numpy.load` allocates what an array's header declares before reading a byte of it,
and inflates a compressed member whole: a 1 MB file can claim or inflate to gigabytes.
`NpzArchive` reads each member's ``.npy`` header first (a few hundred bytes of the
stream), lets the caller check dtype and shape, checks the declared size against the
zip entry's uncompressed size and against `MAX_ARRAY_BYTES`, and only then reads exactly
that many bytes. Object arrays (pickles) are refused. Every failure is a
`CaptureFormatError` naming the file and the array.
"""

from __future__ import annotations

import math
import struct
import tokenize
import zipfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO

import numpy as np

from ego_assets.capture.files import CaptureFiles
from ego_assets.errors import CaptureFormatError

MAX_ARRAY_BYTES = 1 << 30  # 1 GiB: the largest array a reader loads into memory
MAX_HEADER_BYTES = 10_000  # numpy's own default limit for a .npy header

# what a damaged zip or .npy header can raise from zipfile, zlib, struct and numpy
_READ_ERRORS = (
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    zlib.error,
    struct.error,
    OSError,
    EOFError,
    ValueError,
    RuntimeError,  # an encrypted member
    NotImplementedError,  # an unsupported compression method
    OverflowError,
    TypeError,
    KeyError,
    RecursionError,
    SyntaxError,  # a header dict numpy cannot evaluate
    tokenize.TokenError,  # numpy tokenizes version 1 and 2 headers
)


@dataclass(frozen=True, slots=True)
class ArrayHeader:
    """What a ``.npy`` header declares.

    Attributes:
        name: array name (the member name without ``.npy``).
        shape: declared shape.
        dtype: declared dtype.
        fortran_order: column-major data.
        offset: bytes before the data (magic, version, header).
        stored_bytes: the zip entry's uncompressed size (header + data).
    """

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    fortran_order: bool
    offset: int
    stored_bytes: int

    @property
    def nbytes(self) -> int:
        """Declared data size, bytes (exact Python integer arithmetic)."""
        return math.prod(self.shape) * self.dtype.itemsize


class NpzArchive:
    """An open ``.npz`` of a capture; use `open_npz`."""

    def __init__(self, files: CaptureFiles, rel: str, archive: zipfile.ZipFile) -> None:
        self.files = files
        self.rel = rel
        self._archive = archive
        self._members = {
            info.filename.removesuffix(".npy"): info
            for info in archive.infolist()
            if info.filename.endswith(".npy")
        }

    @property
    def names(self) -> list[str]:
        """Array names in the archive."""
        return sorted(self._members)

    def _error(self, name: str, message: str) -> CaptureFormatError:
        return self.files.error(self.rel, message, field=name)

    def _member(self, name: str) -> zipfile.ZipInfo:
        info = self._members.get(name)
        if info is None:
            raise self._error(name, "array is missing")
        return info

    def header(self, name: str) -> ArrayHeader:
        """The declared shape and dtype of array ``name`` (reads only its header)."""
        info = self._member(name)
        try:
            with self._archive.open(info) as fh:
                return self._read_header(name, info, fh)
        except CaptureFormatError:
            raise
        except _READ_ERRORS as exc:
            raise self._error(name, f"unreadable array: {_reason(exc)}") from None

    def _read_header(self, name: str, info: zipfile.ZipInfo, fh: IO[bytes]) -> ArrayHeader:
        """Parse the ``.npy`` header at the start of ``fh`` and check it (not the data)."""
        try:
            major, _minor = np.lib.format.read_magic(fh)
            if major not in (1, 2, 3):
                raise self._error(name, f"unknown .npy format version {major}")
            read = np.lib.format.read_array_header_1_0
            if major > 1:  # 3.0 differs from 2.0 only by a UTF-8 header text
                read = np.lib.format.read_array_header_2_0
            shape, fortran, dtype = read(fh, max_header_size=MAX_HEADER_BYTES)
        except CaptureFormatError:
            raise
        except _READ_ERRORS as exc:
            raise self._error(name, f"unreadable .npy header: {_reason(exc)}") from None
        if dtype.hasobject:
            raise self._error(name, "object arrays (pickles) are refused")
        if any(dim < 0 for dim in shape):
            raise self._error(name, f"negative dimension in shape {shape}")
        header = ArrayHeader(name, tuple(shape), dtype, fortran, fh.tell(), info.file_size)
        if header.offset + header.nbytes != info.file_size:
            raise self._error(
                name,
                f"header declares {header.nbytes} data bytes for shape {header.shape} "
                f"{dtype}, the archive holds {info.file_size - header.offset}",
            )
        return header

    def read(self, name: str, check: Callable[[ArrayHeader], None] | None = None) -> np.ndarray:
        """Array ``name``, after ``check(header)`` and the size checks passed (read-only).

        Raises:
            CaptureFormatError: missing array, bad header, ``check`` failing, a size over
                `MAX_ARRAY_BYTES`, or data that is truncated or corrupt (CRC).
        """
        info = self._member(name)
        try:
            with self._archive.open(info) as fh:
                header = self._read_header(name, info, fh)
                if check is not None:
                    check(header)
                if header.nbytes > MAX_ARRAY_BYTES:
                    raise self._error(
                        name,
                        f"shape {header.shape} {header.dtype} is {header.nbytes} bytes, over "
                        f"the {MAX_ARRAY_BYTES} byte limit",
                    )
                data = fh.read(header.nbytes)
                fh.read(1)  # reach the end of the member: zipfile checks its CRC there
        except CaptureFormatError:
            raise
        except _READ_ERRORS as exc:
            raise self._error(name, f"unreadable array: {_reason(exc)}") from None
        if len(data) != header.nbytes:
            raise self._error(name, f"array data is truncated ({len(data)} of {header.nbytes})")
        flat = np.frombuffer(data, dtype=header.dtype)
        if header.fortran_order:
            return flat.reshape(header.shape[::-1]).transpose()
        return flat.reshape(header.shape)


@contextmanager
def open_npz(files: CaptureFiles, rel: str) -> Iterator[NpzArchive]:
    """Open the ``.npz`` ``rel`` of a capture (no member is read yet)."""
    path = files.path(rel)
    try:
        archive = zipfile.ZipFile(path)
    except _READ_ERRORS as exc:
        raise files.error(rel, f"not a readable .npz file: {_reason(exc)}") from None
    with archive:
        yield NpzArchive(files, rel, archive)


def _reason(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return text or type(exc).__name__
