"""Errors raised for malformed capture input.

A `CaptureFormatError` always names the capture, the file (relative to the capture
folder), and where known the field and the 1-based data row (header excluded), so a
data engineer can open the file and go straight to the problem.
"""

from __future__ import annotations


class CaptureFormatError(ValueError):
    """Malformed input: the capture cannot be read and nothing is written for it."""

    def __init__(
        self,
        capture: str,
        file: str,
        message: str,
        *,
        field: str | None = None,
        row: int | None = None,
    ) -> None:
        self.capture = capture
        self.file = file
        self.field = field
        self.row = row
        self.reason = message
        where = [f"capture {capture!r}", f"file {file!r}"]
        if field is not None:
            where.append(f"field {field!r}")
        if row is not None:
            where.append(f"row {row}")
        super().__init__(f"{', '.join(where)}: {message}")


class CaptureKeyError(ValueError):
    """A capture key (Dagster partition key) that breaks the naming rule."""
