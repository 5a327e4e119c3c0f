"""Which bounded partition set a capture belongs to (pure: no Dagster).

A deployment splits its captures over ``EGO_CAPTURE_SETS`` sets (default 1); each set is
its own Dagster partitions definition with its own copy of the per-capture assets, so no
asset has more partitions than one set holds (see ``docs/scale.md``). The set of a
capture is a function of its key alone:

* a stable 64-bit hash of the key (BLAKE2b, 8 bytes; not Python's ``hash``, which is
  salted per process), then
* jump consistent hashing (Lamping & Veach, "A Fast, Minimal Memory, Consistent Hash
  Algorithm", 2014) into ``sets`` buckets: no lookup table, the same answer in every
  process, sets of equal size on average, and going from ``S`` to ``S + 1`` sets moves
  only the ~1/(S + 1) of captures that land in the new set.

With one set every capture is in set 0, which is the layout from before sets existed
(partitions ``captures``, unprefixed asset keys).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from ego_assets.exports import registry
from ego_assets.keys import validate_capture_key

CAPTURE_SETS_ENV = "EGO_CAPTURE_SETS"
DEFAULT_CAPTURE_SETS = 1
MAX_CAPTURE_SETS = 999  # the prefix has three digits: s001 .. s999
# The per-capture assets every set has, in pipeline order (exporters last, as registered).
PER_CAPTURE_ASSETS = ("raw_capture", "trajectory", "quality_report", *registry.names())
_MASK64 = (1 << 64) - 1
_JUMP_MULTIPLIER = 2862933555777941757


def key_hash(capture_key: str) -> int:
    """A stable unsigned 64-bit hash of a capture key (same in every process and run)."""
    digest = hashlib.blake2b(capture_key.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def jump_hash(key: int, buckets: int) -> int:
    """Jump consistent hash of the 64-bit ``key`` into ``range(buckets)`` (Lamping & Veach)."""
    if buckets < 1:
        raise ValueError(f"buckets must be >= 1, got {buckets}")
    b, j = -1, 0
    key &= _MASK64
    while j < buckets:
        b = j
        key = (key * _JUMP_MULTIPLIER + 1) & _MASK64
        j = int((b + 1) * (float(1 << 31) / float((key >> 33) + 1)))
    return b


def capture_set(capture_key: str, sets: int) -> int:
    """The set (0 .. sets-1) of a capture among ``sets`` sets."""
    return jump_hash(key_hash(validate_capture_key(capture_key)), sets)


def set_prefix(index: int) -> str:
    """Asset-key prefix of set ``index`` (``s001``); set 0 has none (empty string)."""
    if not 0 <= index <= MAX_CAPTURE_SETS:
        raise ValueError(f"capture set index must be 0..{MAX_CAPTURE_SETS}, got {index}")
    return f"s{index:03d}" if index else ""


def parse_capture_sets(text: str | None) -> int:
    """``EGO_CAPTURE_SETS`` as a number of sets (whole number 1..999; empty: 1)."""
    text = (text or "").strip()
    if not text:
        return DEFAULT_CAPTURE_SETS
    if not text.isdigit() or not 1 <= int(text) <= MAX_CAPTURE_SETS:
        raise ValueError(
            f"{CAPTURE_SETS_ENV} must be a whole number from 1 to {MAX_CAPTURE_SETS}: {text!r}"
        )
    return int(text)


def capture_sets_from_env(environ: Mapping[str, str]) -> int:
    """The number of capture sets a deployment runs with (``EGO_CAPTURE_SETS``)."""
    return parse_capture_sets(environ.get(CAPTURE_SETS_ENV))
