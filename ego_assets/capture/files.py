"""Safe access to the files of one raw capture folder, with errors that say where.

Every reader goes through `CaptureFiles`: it resolves untrusted relative names inside
the capture folder (no absolute paths, no ``..``, no symlink leaving the folder, no
symlink loop), and reads CSV (pyarrow), JSON and JSON Lines, turning every parse
failure into a `CaptureFormatError` naming capture, file, field and row: bytes that
are not UTF-8, JSON nested deeper than `MAX_JSON_DEPTH`, integers too long to parse,
a JSON document over `MAX_JSON_BYTES`, a JSON string that is not Unicode (an unpaired
surrogate escape), an unreadable file. A UTF-8 byte-order mark at
the start of a CSV or JSON file is accepted (and skipped).
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from ego_assets.errors import CaptureFormatError
from ego_assets.fileio import json_loads, plain_integers

MARKER_FILE = "ego_capture.json"
MARKER_FORMAT = "ego-capture-marker"
MARKER_VERSION = 1
CAPTURE_KINDS = (
    "holos",
    "webxr",
    "mano_video",
    "aria_mps",
    "egodex",
    "lerobot_v3",
    "holos_hdf5",
    "egosmith_webdataset",
    "mano_sequence",
)

MAX_JSON_BYTES = 64 << 20  # a JSON document (not JSON Lines) is read whole: at most 64 MiB
MAX_JSON_DEPTH = 64  # deepest nesting of arrays/objects a JSON document may have
UTF8_BOM = b"\xef\xbb\xbf"

# C0/C1 control characters, and the surrogates that stand for undecodable name bytes
_UNPRINTABLE_RE = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
_SURROGATE_RE = re.compile("[\ud800-\udfff]")
_ROW_RE = re.compile(r"[Rr]ow #(\d+)")
_COL_RE = re.compile(r"column #(\d+)")


@dataclass(frozen=True, slots=True)
class CaptureFiles:
    """The files of one capture folder.

    Attributes:
        capture: capture key (for error messages).
        root: the capture folder.
    """

    capture: str
    root: Path

    def error(
        self, file: str, message: str, *, field: str | None = None, row: int | None = None
    ) -> CaptureFormatError:
        """A `CaptureFormatError` for this capture."""
        return CaptureFormatError(self.capture, file, message, field=field, row=row)

    def path(self, rel: str, *, must_exist: bool = True) -> Path:
        """Resolve ``rel`` inside the capture folder, refusing anything that escapes it."""
        pure = PurePosixPath(rel)
        if pure.is_absolute() or ".." in pure.parts or "\\" in rel or not rel:
            raise self.error(rel, "file name escapes the capture folder")
        if _UNPRINTABLE_RE.search(rel):
            raise self.error(rel, "file name has a control character or bytes that are not UTF-8")
        path = self.root.joinpath(*pure.parts)
        if len(pure.parts) == 1:  # one lstat says all of a regular file directly inside
            try:
                st = os.lstat(path)
            except OSError:
                st = None  # missing or unreadable: the checks below name the problem
            if st is not None and stat.S_ISREG(st.st_mode):
                if must_exist and st.st_size == 0:
                    raise self.error(rel, "file is empty")
                return path
        try:
            root = self.root.resolve()
            if path.is_symlink() and not path.exists():
                _raise_if_loop(path)
            if path.is_symlink() or path.exists():
                resolved = path.resolve()
                if resolved != root and root not in resolved.parents:
                    raise self.error(rel, "symlink points outside the capture folder")
            if must_exist:
                if not path.is_file():
                    raise self.error(rel, _not_a_file(path))
                if path.stat().st_size == 0:
                    raise self.error(rel, "file is empty")
        except RuntimeError:  # Path.resolve on a symlink cycle (Python < 3.13)
            raise self.error(rel, "symlink loop") from None
        except OSError as exc:
            raise self.error(rel, _os_problem(exc)) from None
        return path

    def exists(self, rel: str) -> bool:
        """True when ``rel`` is a regular file inside the folder (after the safety checks)."""
        return self.path(rel, must_exist=False).is_file()

    def list_files(self) -> list[str]:
        """Every file below the folder as sorted POSIX relative paths (symlinks checked)."""
        out = []
        for p in sorted(self.root.rglob("*")):
            rel = p.relative_to(self.root).as_posix()
            if p.is_symlink() or _UNPRINTABLE_RE.search(rel):
                self.path(rel, must_exist=False)
            if p.is_file():
                out.append(rel)
        return out

    def read_bytes(self, rel: str) -> bytes:
        path = self.path(rel)
        try:
            return path.read_bytes()
        except OSError as exc:
            raise self.error(rel, _os_problem(exc)) from None

    def read_json(self, rel: str) -> Any:
        """Parse a JSON document (UTF-8, optional BOM, at most `MAX_JSON_BYTES`).

        A syntax error names its line as the row; bytes that are not UTF-8 name the line
        and byte offset; nesting deeper than `MAX_JSON_DEPTH` is refused.
        """
        path = self.path(rel)
        size = path.stat().st_size
        if size > MAX_JSON_BYTES:
            raise self.error(
                rel, f"JSON document of {size} bytes is over the {MAX_JSON_BYTES} byte limit"
            )
        data = self.read_bytes(rel).removeprefix(UTF8_BOM)
        text = self._decode(rel, data)
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            message = f"malformed JSON: {exc.msg} (column {exc.colno})"
            raise self.error(rel, message, row=exc.lineno) from None
        except RecursionError:
            raise self.error(rel, f"JSON nested deeper than {MAX_JSON_DEPTH} levels") from None
        except ValueError as exc:  # e.g. an integer literal over Python's 4300-digit limit
            raise self.error(rel, f"malformed JSON: {_first_line(exc)}") from None
        problem = _json_problem(doc)
        if problem is not None:
            raise self.error(rel, problem)
        return doc

    def _decode(self, rel: str, data: bytes, row: int | None = None) -> str:
        """``data`` as UTF-8 text; invalid bytes name their line (or ``row``) and offset."""
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = row if row is not None else data.count(b"\n", 0, exc.start) + 1
            bad = data[exc.start : exc.start + 1].hex()
            message = f"not UTF-8 text: byte 0x{bad} at offset {exc.start} ({exc.reason})"
            raise self.error(rel, message, row=line) from None

    def read_json_lines(self, rel: str) -> tuple[list[Any], list[int]]:
        """Parse JSON Lines: the records and their 1-based line numbers (blank lines skipped).

        A syntax error names its line as the row. Lines are parsed by orjson where it
        reads them as json does (`ego_assets.fileio.json_loads`).
        """
        records: list[Any] = []
        lines: list[int] = []
        data = self.read_bytes(rel).removeprefix(UTF8_BOM)
        plain = plain_integers(data)
        for lineno, raw in enumerate(data.split(b"\n"), start=1):
            line = self._decode(rel, raw, row=lineno)
            if not line.strip():
                continue
            records.append(self._json_line(rel, line, lineno, plain))
            lines.append(lineno)
        if not records:
            raise self.error(rel, "file has no records")
        return records, lines

    def _json_line(self, rel: str, line: str, lineno: int, plain: bool = False) -> Any:
        try:
            return json_loads(line, plain=plain)
        except json.JSONDecodeError as exc:
            raise self.error(rel, f"malformed JSON line: {exc.msg}", row=lineno) from None
        except RecursionError:
            message = f"JSON nested deeper than {MAX_JSON_DEPTH} levels"
            raise self.error(rel, message, row=lineno) from None
        except ValueError as exc:
            message = f"malformed JSON line: {_first_line(exc)}"
            raise self.error(rel, message, row=lineno) from None

    def read_line(self, rel: str, limit: int = 1 << 20) -> str:
        """The first line of a text file (at most ``limit`` bytes, BOM skipped), as UTF-8."""
        path = self.path(rel)
        try:
            with path.open("rb") as fh:
                first = fh.readline(limit).removeprefix(UTF8_BOM)
        except OSError as exc:
            raise self.error(rel, _os_problem(exc)) from None
        return self._decode(rel, first, row=0)

    def read_schema_document(self, rel: str, schema: str, version: int) -> dict[str, Any]:
        """A JSON object that declares ``schema`` and ``schema_version``, both checked."""
        doc = self.read_json(rel)
        if not isinstance(doc, dict):
            raise self.error(rel, "expected a JSON object")
        if require(self, rel, doc, "schema", str) != schema:
            raise self.error(rel, f"schema must be {schema!r}", field="schema")
        found = require(self, rel, doc, "schema_version", int)
        if found != version:
            message = f"unknown schema_version {found}, this reader reads {version}"
            raise self.error(rel, message, field="schema_version")
        return doc

    def read_csv(
        self,
        rel: str,
        columns: Sequence[str],
        types: Mapping[str, pa.DataType],
        *,
        default_type: pa.DataType | None = None,
        optional: Sequence[str] = (),
        threads: bool = False,
    ) -> pa.Table:
        """Read a CSV whose header must be exactly ``columns`` (+ any of ``optional``).

        Args:
            rel: relative file name.
            columns: required header, in order.
            types: Arrow type per column; others get ``default_type`` (float64 if None).
            optional: columns that may follow the required ones.
            threads: let pyarrow parse with several threads.

        Returns:
            The table; a wrong header, a bad value or a short row raise
            `CaptureFormatError` naming the field and the 1-based data row.
        """
        path = self.path(rel)
        header = self.read_line(rel).strip().split(",")
        expected = list(columns)
        if header[: len(expected)] != expected or not set(header[len(expected) :]) <= set(optional):
            missing = [c for c in expected if c not in header]
            extra = [c for c in header if c not in expected and c not in optional]
            if missing:
                raise self.error(rel, "missing column", field=missing[0], row=0)
            if extra:
                raise self.error(rel, "unexpected column", field=extra[0], row=0)
            raise self.error(rel, "columns are out of order", field=header[0], row=0)
        default = default_type or pa.float64()
        column_types = {c: types.get(c, default) for c in header}
        try:
            table = pacsv.read_csv(
                path,
                read_options=pacsv.ReadOptions(use_threads=threads, block_size=1 << 22),
                parse_options=pacsv.ParseOptions(newlines_in_values=False),
                convert_options=pacsv.ConvertOptions(
                    column_types=column_types,
                    null_values=[""],  # "nan"/"inf" are float values (kept, flagged)
                    strings_can_be_null=False,
                    quoted_strings_can_be_null=False,
                ),
            )
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise self._csv_error(rel, header, str(exc)) from None
        except OSError as exc:
            raise self.error(rel, _os_problem(exc)) from None
        if table.num_rows == 0:
            raise self.error(rel, "file has a header but no rows")
        for name in header:
            col = table.column(name)
            if col.null_count:
                row = int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0]) + 1
                raise self.error(rel, "empty value", field=name, row=row)
        return table

    def _csv_error(self, rel: str, header: list[str], message: str) -> CaptureFormatError:
        col = _COL_RE.search(message)
        row = _ROW_RE.search(message)
        field = header[int(col.group(1))] if col and int(col.group(1)) < len(header) else None
        row_no = int(row.group(1)) - 1 if row else None  # pyarrow counts the header line
        if row_no is None and "Expected" in message:
            row_no = _short_row(self.root / rel, len(header))
        bad_value = _BAD_VALUE_RE.search(message)
        if row_no is None and field is not None and bad_value:
            row_no = _value_row(self.root / rel, field, bad_value.group(1))
        detail = message.splitlines()[0]
        detail = re.sub(r"^In CSV column #\d+: Row #\d+: ", "", detail)
        return self.error(rel, f"malformed CSV: {detail}", field=field, row=row_no)


def _short_row(path: Path, n_columns: int) -> int | None:
    """1-based data row of the first line whose field count is not ``n_columns``."""
    with path.open("rb") as fh:
        next(fh, None)
        for i, line in enumerate(fh, start=1):
            if line.strip() and line.count(b",") + 1 != n_columns:
                return i
    return None


_BAD_VALUE_RE = re.compile(r"invalid value '(.*)'$", re.MULTILINE)


def _value_row(path: Path, field: str, value: str) -> int | None:
    """1-based data row of the first ``value`` in column ``field`` (read as text)."""
    try:
        table = pacsv.read_csv(
            path,
            read_options=pacsv.ReadOptions(use_threads=False),
            convert_options=pacsv.ConvertOptions(
                include_columns=[field], column_types={field: pa.string()}
            ),
        )
    except (pa.ArrowInvalid, OSError):
        return None
    hits = np.flatnonzero(table.column(field).to_numpy(zero_copy_only=False) == value)
    return int(hits[0]) + 1 if len(hits) else None


def _json_problem(doc: Any) -> str | None:
    """Why a parsed JSON document is unusable: nested deeper than `MAX_JSON_DEPTH`, or a
    string (value or key) with an unpaired surrogate escape such as ``"\\ud800"``, which
    is not Unicode text and could not be written as UTF-8 later. Iterative."""
    stack: list[tuple[Any, int]] = [(doc, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            if _SURROGATE_RE.search(value):
                return f"text {value[:40]!r} has an unpaired surrogate escape (not Unicode)"
            continue
        if isinstance(value, dict):
            children: list[Any] = [*value.keys(), *value.values()]
        elif isinstance(value, list):
            children = value
        else:
            continue
        if depth > MAX_JSON_DEPTH:
            return f"JSON nested deeper than {MAX_JSON_DEPTH} levels"
        stack.extend((child, depth + 1) for child in children)
    return None


def _not_a_file(path: Path) -> str:
    if path.is_dir():
        return "is a folder, not a file"
    if path.exists():
        return "is not a regular file"
    return "file is missing"


def _raise_if_loop(path: Path) -> None:
    """Raise the ``ELOOP`` `OSError` of a symlink cycle (a dangling link passes)."""
    try:
        path.stat()
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0]


def _os_problem(exc: OSError) -> str:
    """The reason of an OS error, without the absolute path it carries."""
    if exc.errno == errno.ELOOP:
        return "symlink loop"
    return f"cannot read the file: {exc.strerror or type(exc).__name__}"


def column_block(table: pa.Table, names: Sequence[str], dtype: str = "float64") -> np.ndarray:
    """(T, len(names)) array of the named columns, one vectorized copy per column."""
    out = np.empty((table.num_rows, len(names)), dtype=dtype)
    start = 0
    for batch in table.select(list(names)).to_batches():  # per batch: cache-friendly writes
        stop = start + batch.num_rows
        for i, col in enumerate(batch.columns):
            out[start:stop, i] = col.to_numpy(zero_copy_only=False)
        start = stop
    return out


def read_marker(files: CaptureFiles) -> dict[str, Any]:
    """The completion marker ``ego_capture.json``, validated."""
    marker = files.read_json(MARKER_FILE)
    if not isinstance(marker, dict) or marker.get("format") != MARKER_FORMAT:
        raise files.error(MARKER_FILE, f"not an {MARKER_FORMAT} document", field="format")
    if marker.get("version") != MARKER_VERSION:
        raise files.error(
            MARKER_FILE, f"unknown marker version {marker.get('version')!r}", field="version"
        )
    if marker.get("kind") not in CAPTURE_KINDS:
        raise files.error(
            MARKER_FILE,
            f"kind must be one of {CAPTURE_KINDS}, got {marker.get('kind')!r}",
            field="kind",
        )
    return marker


def require(
    files: CaptureFiles, rel: str, doc: Mapping[str, Any], key: str, kind: type | tuple[type, ...]
) -> Any:
    """``doc[key]``, checked to exist and be of ``kind`` (bools are not numbers).

    Numbers are checked too: an integer must fit in int64 and a float must be finite
    (JSON parsers here read ``NaN``, ``Infinity`` and ``1e400`` as non-finite floats).
    """
    if not isinstance(doc, Mapping) or key not in doc:
        raise files.error(rel, "missing field", field=key)
    value = doc[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, bool) and bool not in kinds:
        raise files.error(rel, f"expected {kinds[0].__name__}, got a boolean", field=key)
    if not isinstance(value, kinds):
        raise files.error(
            rel, f"expected {kinds[0].__name__}, got {type(value).__name__}", field=key
        )
    problem = number_problem(value)
    if problem is not None:
        raise files.error(rel, problem, field=key)
    return value


INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


def number_problem(value: Any) -> str | None:
    """Why a JSON number is unusable (int beyond int64, non-finite float), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and not INT64_MIN <= value <= INT64_MAX:
        return f"integer {_short(value)} does not fit in 64 bits"
    if isinstance(value, float) and not math.isfinite(value):
        return f"number is {value} (not finite)"
    return None


def _short(value: int) -> str:
    text = str(value)
    return text if len(text) <= 24 else f"{text[:10]}...{text[-6:]} ({len(text)} digits)"


def number_list(
    files: CaptureFiles, rel: str, doc: Mapping[str, Any], key: str, size: int | None = None
) -> list[float]:
    """``doc[key]`` as a list of finite numbers (``size`` of them when given), as floats."""
    values = require(files, rel, doc, key, list)
    if size is not None and len(values) != size:
        raise files.error(rel, f"expected {size} values, got {len(values)}", field=key)
    for i, v in enumerate(values):
        if not isinstance(v, int | float) or isinstance(v, bool):
            raise files.error(rel, f"value {i}: expected a number", field=key)
        problem = number_problem(v)
        if problem is not None:
            raise files.error(rel, f"value {i}: {problem}", field=key)
    return [float(v) for v in values]
