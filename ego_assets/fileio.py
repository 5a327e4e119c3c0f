"""Storage-free file helpers every room may use: a file's SHA-256, the files below a folder,
atomic file writes, links, JSON (indented or compact) written fast but byte for byte as the
standard library writes it.

No package import here (a leaf of the layering, ``docs/architecture.md``).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import re
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson

TEMPORARY_SUFFIX = ".tmp"
_TOKEN_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789_"


def file_sha256(path: Path, *, follow_symlinks: bool = True) -> str:
    """SHA-256 hex digest of a regular file, streamed; ``follow_symlinks=False`` refuses
    a symbolic link (``OSError``) instead of reading what it points at."""
    flags = os.O_RDONLY | (0 if follow_symlinks else os.O_NOFOLLOW)
    with os.fdopen(os.open(path, flags), "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def list_files(folder: Path) -> list[str]:
    """Every regular file below ``folder`` (a link to one too; no linked folder is
    entered), as POSIX paths relative to it, in the order of their `Path`s (part by
    part): ``sorted(p for p in folder.rglob("*") if p.is_file())``, from one `os.walk`."""
    found = []
    for top, _, names in os.walk(folder):
        rel = os.path.relpath(top, folder)
        parts = () if rel == "." else tuple(rel.split(os.sep))
        found += [(*parts, name) for name in names if os.path.isfile(os.path.join(top, name))]
    return ["/".join(parts) for parts in sorted(found)]


def _create_temporary(path: Path) -> tuple[int, Path]:
    """Create a free hidden sibling of ``path``, ``.<name>.<8 of [a-z0-9_]>.tmp`` (the
    name `ego_assets.storage.Storage.sweep_leftovers` knows), mode 0666 less the umask;
    (its open descriptor, its path)."""
    for _ in range(100):
        token = "".join(secrets.choice(_TOKEN_CHARS) for _ in range(8))
        tmp = path.with_name(f".{path.name}.{token}{TEMPORARY_SUFFIX}")
        try:
            return os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name beside {path}")


@contextmanager
def atomic_output(path: Path, *, fsync: bool = False, lock: bool = True) -> Iterator[Path]:
    """Yield a temporary sibling name of ``path`` that replaces ``path`` once the block
    succeeds (readers see the old file or the new one, never half of one).

    The temporary exists (empty) when the block starts and this writer holds its
    ``flock`` until the rename, so a sweep of leftovers removes only a dead writer's;
    ``lock=False`` for a library that locks the file itself while writing (HDF5).
    ``fsync`` flushes it to disk before the rename. On error it is removed and ``path``
    is left as it was; a killed process leaves it behind (`remove_temporaries`).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _create_temporary(path)
    try:
        if lock:
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield tmp
        if fsync:
            os.fsync(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    finally:
        os.close(fd)


def write_file_atomic(path: Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` through `atomic_output`; return ``path``."""
    with atomic_output(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def link_or_copy(source: Path, target: Path) -> None:
    """Hard-link the immutable file ``source`` at ``target`` (copied when they are on two
    file systems); ``target``'s folder is made when missing (tried after the link, not
    before: a release links thousands of files into a few folders). Neither is ever
    written through again."""
    target = Path(target)
    try:
        try:
            os.link(source, target)
        except FileNotFoundError:
            if not Path(source).exists():
                raise
            target.parent.mkdir(parents=True, exist_ok=True)
            os.link(source, target)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)


def remove_temporaries(path: Path) -> list[Path]:
    """Delete the temporaries a killed `atomic_output` of ``path`` left beside it."""
    path = Path(path)
    pattern = f".{path.name}.*{TEMPORARY_SUFFIX}"
    stale = sorted(path.parent.glob(pattern)) if path.parent.is_dir() else []
    for tmp in stale:
        tmp.unlink(missing_ok=True)
    return stale


# orjson writes what json.dumps writes but for: non-ASCII and DEL (raw, not \\u escaped),
# floats below 1e-4 (``0.000099``, ``1e-7`` where json writes ``9.9e-05``, ``1e-07``) and
# NaN or infinities (``null``). Those floats are printed again (`_repr_floats`); the
# rest, and every type orjson is not told to pass through (subclasses, dataclasses,
# datetimes: they reach json's rules), send the document to json itself. A number printed
# with an exponent or four leading zeros (after ``": "`` or an indentation, so inside a
# string it only costs a second look):
_ORJSON_DIFFERS = re.compile(rb"(?:: |\n *|^)-?(?:0\.0000|[0-9.]+[eE])")
# An integer of 19 digits or more (past 64 bits, where orjson reads a float) is a run of
# 19 digits after a byte that is no digit, ``.``, ``e``, ``E``, ``+`` (a fraction or an
# exponent), optionally after a ``-`` that does not follow one of those: found by mapping
# every byte to its class (one C pass) and two substring searches, not a regex (the
# digits of a float's fraction, such as ``0.0073738908395171165``, are no integer).
_NUMBER_CLASSES = bytearray(b" " * 256)
_NUMBER_CLASSES[ord("0") : ord("9") + 1] = b"0" * 10
_NUMBER_CLASSES[ord("-")] = ord("-")
for _byte in b".eE+":
    _NUMBER_CLASSES[_byte] = ord("x")
del _byte
_DIGITS_19 = b"0" * 19
_LONG_INTEGER = b" " + _DIGITS_19
_LONG_NEGATIVE = b" -" + b"0" * 19
_ORJSON_OPTIONS = (
    orjson.OPT_INDENT_2
    | orjson.OPT_PASSTHROUGH_SUBCLASS
    | orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_DATETIME
)


def json_bytes(doc: Any, *, indent: int = 2, sort_keys: bool = False) -> bytes:
    """``json.dumps(doc, indent=indent, sort_keys=sort_keys).encode()``, the same bytes,
    about 20 times faster on plain documents (orjson's encoder, checked, re-indented;
    the standard library's pure-Python indenting encoder when orjson would differ)."""
    if indent < 1:
        raise ValueError(f"indent {indent}: json_bytes writes indented JSON (1 or more)")
    out = _orjson_ascii(doc, _ORJSON_OPTIONS | (orjson.OPT_SORT_KEYS * sort_keys))
    if out is not None and _ORJSON_DIFFERS.search(out) is not None:
        # floats orjson prints otherwise, printed again; a backslash (a quote may be
        # escaped) leaves the quotes uncounted: json itself then
        out = None if b"\\" in out else _repr_floats(out)
    if out is None:
        return json.dumps(doc, indent=indent, sort_keys=sort_keys).encode()
    if indent == 2:
        return out
    return _reindent(out, indent) or json.dumps(doc, indent=indent, sort_keys=sort_keys).encode()


# A JSON number (what stands between two separators of orjson's compact output).
_NUMBER = re.compile(rb"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?")


_BLANKS = frozenset(b" \n")
_ENDS = frozenset((b",", b"]", b"}", b"\n", b""))  # what may follow a number token
# Where orjson's float may differ from repr: a digit before an exponent (so not the e of
# a key) or before four zeros after the point; in a string too, which the quotes then
# tell. (One pattern starting with a digit: re scans for it several times faster than
# for a lookbehind.)
_FLOAT_MARKS = re.compile(rb"[0-9](?:e|\.0000)")


def _repr_floats(out: bytes) -> bytes:
    """orjson's ASCII ``out`` (compact or indented, no backslash) with each float orjson
    prints otherwise than ``repr`` (below 1e-4 in fixed notation, an exponent without
    json's sign and two digits) printed with ``repr``: every digit before an ``e`` or a
    ``.0000`` is found (`_FLOAT_MARKS`: few in most documents), and taken when it lies in
    a number token (between a separator and the next, the indentation's spaces and
    newlines aside) outside a string (an even count of quotes before it)."""
    pieces: list[bytes] = []
    done = counted = quotes = 0
    for found in _FLOAT_MARKS.finditer(out):
        at = found.start()
        if at < done:  # in the token just printed
            continue
        start = max(out.rfind(b",", done, at), out.rfind(b":", done, at), out.rfind(b"[", done, at))
        start = max(start + 1, done)
        while out[start] in _BLANKS:
            start += 1
        quotes += out.count(b'"', counted, start)
        counted = start
        number = None if quotes % 2 else _NUMBER.match(out, start)
        if (
            number is None
            or number.end() <= at
            or out[number.end() : number.end() + 1] not in _ENDS
        ):
            continue
        end = number.end()
        pieces += [out[done:start], repr(float(out[start:end])).encode()]
        done = end
    return b"".join([*pieces, out[done:]]) if pieces else out


def compact_json_bytes(doc: Any, *, sort_keys: bool = False) -> bytes:
    """``json.dumps(doc, separators=(",", ":"), sort_keys=sort_keys).encode()``, the same
    bytes, several times faster on plain documents: orjson's encoder, its floats printed
    as ``repr`` prints them (`_repr_floats`); the standard library when orjson would
    differ otherwise or a string holds a backslash (a quote may be escaped)."""
    options = orjson.OPT_PASSTHROUGH_SUBCLASS | orjson.OPT_PASSTHROUGH_DATACLASS
    options |= orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_SORT_KEYS * sort_keys
    out = _orjson_ascii(doc, options)
    if out is None or b"\\" in out:
        return json.dumps(doc, separators=(",", ":"), sort_keys=sort_keys).encode()
    return _repr_floats(out)


def _orjson_ascii(doc: Any, options: int) -> bytes | None:
    """orjson's text of ``doc`` when it is ASCII without DEL and holds every value as
    ``doc`` does; None when orjson refuses ``doc`` (a type it passes through, a key not a
    str, an int past 64 bits) or wrote ``null`` for a NaN or an infinity (json: NaN)."""
    try:
        out = orjson.dumps(doc, option=options)
    except TypeError:
        return None
    if not out.isascii() or b"\x7f" in out or (b"null" in out and orjson.loads(out) != doc):
        return None
    return out


def _reindent(out: bytes, indent: int) -> bytes | None:
    """orjson's two-space indentation of ASCII JSON ``out`` as ``indent`` spaces a level
    (a raw newline is never inside a JSON string: each starts an indentation); None
    past 127 levels."""
    depth = 0
    while b"\n" + b"  " * (depth + 1) in out:
        depth += 1
    if depth > 127:
        return None
    # deepest first, through a one-byte mark no ASCII document holds
    for level in range(depth, 0, -1):
        out = out.replace(b"\n" + b"  " * level, bytes((10, 0x80 + level)))
    for level in range(1, depth + 1):
        out = out.replace(bytes((10, 0x80 + level)), b"\n" + b" " * (indent * level))
    return out


def json_loads(raw: bytes | str, *, plain: bool = False) -> Any:
    """``json.loads(raw)``, parsed by orjson (several times faster); what orjson refuses
    and json reads (NaN, infinities, lone surrogates) goes to json, and so does a text
    with an integer of 19 digits or more (orjson reads one past 64 bits as a float).
    ``plain``: the caller found none in a text holding ``raw`` (`plain_integers`)."""
    if not (plain or plain_integers(raw)):
        return json.loads(raw)
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw)


def plain_integers(raw: bytes | str) -> bool:
    """Whether every integer in the JSON text ``raw`` has fewer than 19 digits (what
    orjson reads as json does)."""
    shape = (raw.encode() if isinstance(raw, str) else raw).translate(_NUMBER_CLASSES)
    if _DIGITS_19 not in shape:  # one search where most texts end (a fraction's digits too)
        return True
    shape = b" " + shape
    return _LONG_INTEGER not in shape and _LONG_NEGATIVE not in shape
