"""Capture keys: one capture = one episode = one Dagster partition key.

The one rule, used by the sensor, the CLI, the storage layout and the tests:
1 to 128 characters from ``[A-Za-z0-9._-]``, starting with a letter or digit, and
never ``..`` (Dagster's UI uses ``...`` for ranges; ``..`` would escape a folder).
"""

from __future__ import annotations

import re

from ego_assets.errors import CaptureKeyError

MAX_KEY_LENGTH = 128
_KEY_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def validate_capture_key(key: str) -> str:
    """Return ``key`` unchanged if it is a valid capture key, else raise `CaptureKeyError`."""
    if not isinstance(key, str):
        raise CaptureKeyError(f"capture key must be a string, got {type(key).__name__}")
    if len(key) > MAX_KEY_LENGTH:
        raise CaptureKeyError(
            f"capture key {key[:40]!r}... is {len(key)} characters; at most {MAX_KEY_LENGTH}"
        )
    if not _KEY_PATTERN.fullmatch(key):
        raise CaptureKeyError(
            f"capture key {key!r} must match [A-Za-z0-9][A-Za-z0-9._-]* "
            "(letters, digits, '.', '_', '-'; no '/', spaces or control characters)"
        )
    if ".." in key:
        raise CaptureKeyError(f"capture key {key!r} must not contain '..'")
    return key


def is_valid_capture_key(key: str) -> bool:
    """True when `validate_capture_key` would accept ``key``."""
    try:
        validate_capture_key(key)
    except CaptureKeyError:
        return False
    return True
