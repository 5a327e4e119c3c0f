"""The Holos HDF5 writer core: the format's constants, the export notes and small helpers
(no h5py: `ego_assets.exports.holos` reads the version here; the HDF5 layer,
`H5Writer`, is in `holos_h5`).

Part of the writer of `ego_assets.formats.holos_hdf5` (the format: docs/formats/holos-hdf5.md).
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field

import numpy as np

from ego_assets.formats.holos_clock import MAX_AGE_NS
from ego_assets.trajectory.records import to_jsonable

FORMAT_NAME = "holos_hdf5"
CONVENTION_VERSION = "HolosCapture-1.0"
CONVENTIONS = f"CF-1.11, {CONVENTION_VERSION}"
# Code version of the exporter: bump exactly when the bytes for an unchanged input change.
EXPORTER_VERSION = f"{FORMAT_NAME}-2+{CONVENTION_VERSION}"
REFERENCES = "ego_assets docs/formats/holos-hdf5.md (Holos HDF5 export, HolosCapture-1.0)"
ENV_NAME = "holos_capture"
ENV_TYPE_NO_SIMULATOR = 99
DEMO = "data/demo_0"

POSE_COMPONENTS = ("x", "y", "z", "qx", "qy", "qz", "qw")
AXIS_XYZ = ("x", "y", "z")
IMAGE_UV = ("u", "v")
INTRINSICS = ("fx", "fy", "cx", "cy")
# ARKit's skeleton has 27 joints; the format's joint scale has 26: forearmArm is left out.
ARKIT_OMITTED = ("forearmArm",)

GZIP_LEVEL = 4
MEDIA_GZIP_LEVEL = 1  # container bytes hardly compress; level 1 keeps the cost down
TINY_BYTES = 1024  # datasets smaller than this are stored contiguous and unfiltered
CHUNK_TARGET_BYTES = 64 * 1024  # time-major chunks of about this size (whole rows)
OBS_CHUNK_ROWS = 64  # at most this many samples per obs chunk (random short windows)
BLOCK_BYTES = 1 << 20  # assembled (`Rows`) datasets are written this much at a time
MEDIA_CHUNK_BYTES = 1 << 20
MEDIA_READ_BYTES = 8 << 20
FILL = np.nan
PURE_DIM = "This is a netCDF dimension but not a netCDF variable."
SIDES = ("left", "right")
DEVICE_CLOCK_COMMENT = (
    "device clock with no known epoch: dates are the device clock read as Unix time, "
    "not wall-clock time; differences are exact"
)
# model units UDUNITS does not know -> (CF units, comment saying what they are)
NON_UDUNITS = {"px": ("1", "pixels")}

RESAMPLING = (
    "zero-order hold onto master_clock: every sample carries the newest value of each other "
    "stream at or before its time; NaN where that stream has no sample yet, its newest "
    f"sample is older than {MAX_AGE_NS / 1e9:g} s, or the source marked it not tracked"
)
ACTION_DERIVATION = (
    "dominant-hand wrist pose delta on the demo clock: position p[t+1] - p[t] (m) and "
    "rotation q[t+1] * conj(q[t]) (xyzw); identity on the last row and where either "
    "sample is missing (NaN-free)"
)
ACTION_DERIVATION_POSITION = (
    "dominant-hand wrist position delta on the demo clock: p[t+1] - p[t] (m); the wrist "
    "landmark carries no rotation; zero on the last row and where either sample is missing"
)
ACTION_DERIVATION_DEVICE = (
    "no hand was tracked: device pose delta on the demo clock, position p[t+1] - p[t] (m) "
    "and rotation q[t+1] * conj(q[t]) (xyzw); identity on the last row and where missing"
)


@dataclass
class ExportNotes:
    """What an export wrote, skipped and embedded verbatim (also the JSON sidecar).

    Attributes:
        capture_id: the episode.
        source_kind: the capture's source kind.
        samples: demo samples (T).
        master_clock: the ``master_clock`` attribute.
        obs: the ``obs`` keys written.
        raw: the ``/holos/raw`` groups written.
        skipped: spec items the capture has no data for, each with the reason.
        extras: package files embedded under ``/holos/files`` (no typed home).
        decode_frames: whether decoded video frames were added.
    """

    capture_id: str
    source_kind: str
    samples: int = 0
    master_clock: str = ""
    obs: list[str] = field(default_factory=list)
    raw: list[str] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)
    extras: list[str] = field(default_factory=list)
    decode_frames: bool = False

    def skip(self, item: str, reason: str) -> None:
        self.skipped.append({"item": item, "reason": reason})

    def to_json(self) -> str:
        return json.dumps(to_jsonable(self.__dict__), indent=1, sort_keys=True) + "\n"


# --------------------------------------------------------------------------- helpers


def iso_utc(epoch_ns: int) -> str:
    """ISO-8601 UTC (``Z``) of epoch nanoseconds: microseconds, nanoseconds when needed."""
    seconds, rem = divmod(int(epoch_ns), 1_000_000_000)
    stamp = dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S")
    frac = f"{rem // 1000:06d}" if rem % 1000 == 0 else f"{rem:09d}"
    return f"{stamp}.{frac}Z"


def chunk_rows(row_bytes: int, rows: int) -> int:
    """Rows per time-major chunk: a power of two near `CHUNK_TARGET_BYTES`, at most ``rows``."""
    target = max(1, CHUNK_TARGET_BYTES // max(1, row_bytes))
    power = 1 << (target.bit_length() - 1)
    return max(1, min(power, rows))


def _u8(values: np.ndarray) -> np.ndarray:
    return np.asarray(values, dtype=bool).astype(np.uint8)


def label_text(value: bytes | str) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def safe_name(name: str) -> str:
    """A group name from a stream, anchor or file name (no '/', not '.' or '..')."""
    cleaned = name.replace("/", "_").strip()
    return cleaned if cleaned not in ("", ".", "..") else f"_{cleaned}"
