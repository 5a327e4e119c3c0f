"""Byte-deterministic file writers for synthetic captures (CSV, JSON, NPZ, WAV, JPEG)."""

from __future__ import annotations

import io
import json
import wave
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

AUDIO_RATE_HZ = 16_000
_ZIP_DATE = (1980, 1, 1, 0, 0, 0)


def _ensure_parent(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)


def write_csv(path: Path, columns: Sequence[tuple[str, np.ndarray, str]]) -> None:
    """Write a CSV from named columns.

    Args:
        path: output file.
        columns: (header name, (T,) values, printf format such as ``"%.6f"``, ``"%d"``,
            ``"%s"``) per column, in order.
    """
    _ensure_parent(path)
    header = ",".join(name for name, _, _ in columns)
    fmt = ",".join(f for _, _, f in columns)
    rows = zip(*(values.tolist() for _, values, _ in columns), strict=True)
    body = "".join(fmt % row + "\n" for row in rows)
    path.write_text(header + "\n" + body, encoding="utf-8", newline="")


def write_json(path: Path, obj: Any) -> None:
    """Write JSON with a fixed layout (indent 2, UTF-8, trailing newline)."""
    _ensure_parent(path)
    text = json.dumps(obj, indent=2, ensure_ascii=False, allow_nan=False)
    path.write_text(text + "\n", encoding="utf-8", newline="")


def write_jsonl(path: Path, records: Sequence[Any]) -> None:
    """Write JSON Lines, one compact record per line."""
    _ensure_parent(path)
    lines = (json.dumps(r, separators=(",", ":"), allow_nan=False) + "\n" for r in records)
    path.write_text("".join(lines), encoding="utf-8", newline="")


def portable_floats(arr: np.ndarray) -> np.ndarray:
    """``arr`` with float64 values rounded to float32 precision (dtype kept).

    Binary files hold every bit, and numpy's float64 ``sin``/``cos`` give different last
    bits on different CPUs (its AVX-512 SIMD paths against libm's elsewhere), so a
    synthesized ``.npz`` would differ from machine to machine; rounded, the bytes are the
    same everywhere (a value would have to sit within one float64 ulp of a float32
    rounding boundary to differ), and 2**-24 relative is far below any estimator's noise.
    """
    if arr.dtype != np.float64:
        return arr
    return arr.astype(np.float32).astype(np.float64)


def write_npz(path: Path, arrays: Mapping[str, np.ndarray]) -> None:
    """Write an uncompressed ``.npz`` with fixed zip timestamps (``np.savez`` stamps now)
    and portable floats (`portable_floats`), so the same seed gives the same bytes on any
    machine."""
    _ensure_parent(path)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as zf:
        for name, arr in arrays.items():
            buf = io.BytesIO()
            data = np.ascontiguousarray(portable_floats(arr))
            np.lib.format.write_array(buf, data, allow_pickle=False)
            info = zipfile.ZipInfo(f"{name}.npy", date_time=_ZIP_DATE)
            info.external_attr = 0o644 << 16
            zf.writestr(info, buf.getvalue())


def write_wav(path: Path, seconds: float, seed: int) -> None:
    """Quiet PCM16 mono 16 kHz audio: a 220 Hz tone plus seeded low noise."""
    _ensure_parent(path)
    n = round(seconds * AUDIO_RATE_HZ)
    t = np.arange(n) / AUDIO_RATE_HZ
    noise = np.random.default_rng([seed, 0xA0D1]).normal(0.0, 0.004, n)
    signal = 0.03 * np.sin(2 * np.pi * 220.0 * t) + noise
    pcm = np.clip(np.round(signal * 32767), -32768, 32767).astype("<i2")
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(AUDIO_RATE_HZ)
        wav.writeframes(pcm.tobytes())


def write_jpeg(path: Path, rgb: np.ndarray, size: tuple[int, int] = (160, 120)) -> None:
    """Write a (H, W, 3) uint8 RGB image as a JPEG thumbnail of ``size`` (W, H), quality 85."""
    _ensure_parent(path)
    img = Image.fromarray(rgb).resize(size, Image.Resampling.BILINEAR)
    img.save(path, format="JPEG", quality=85, optimize=False, progressive=False)


def iso_utc(epoch_ns: int) -> str:
    """ISO-8601 UTC with microseconds and ``Z`` for integer epoch nanoseconds."""
    seconds, rem_ns = divmod(int(epoch_ns), 1_000_000_000)
    day, sec = divmod(seconds, 86_400)
    date = np.datetime64(day, "D").astype(str)
    hh, rest = divmod(sec, 3600)
    mm, ss = divmod(rest, 60)
    return f"{date}T{hh:02d}:{mm:02d}:{ss:02d}.{rem_ns // 1000:06d}Z"


def rounded(values: np.ndarray, decimals: int) -> list[Any]:
    """Nested Python lists of ``values`` rounded to ``decimals`` (short, stable JSON floats)."""
    out: list[Any] = np.round(np.asarray(values, dtype=np.float64), decimals).tolist()
    return out
