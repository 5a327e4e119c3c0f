"""Property: whatever happens to one file of a capture, conversion succeeds or fails cleanly.

Hypothesis picks a capture kind, one of its files and a mutation (bytes flipped or
inserted, tokens that break parsers such as ``1e400`` or 25 digits, truncation,
deletion) and converts the capture. The outcome must be a written trajectory or one
`CaptureFormatError` naming the capture and a file, on one line, with nothing written;
never another exception, within `SECONDS_PER_EXAMPLE` and `RSS_GROWTH_MB` of memory.
Derandomized and bounded in examples, so the suite stays fast and repeatable; set
``EGO_FUZZ_EXAMPLES=2000`` to explore further with a random seed.
"""

from __future__ import annotations

import os
import resource
import shutil
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ego_assets.capture import read_capture
from ego_assets.errors import CaptureFormatError
from ego_assets.trajectory.store import write_trajectory
from ego_assets_tests.malformed import KINDS, make_base

EXAMPLES = int(os.environ.get("EGO_FUZZ_EXAMPLES", "120"))
SECONDS_PER_EXAMPLE = 10.0
RSS_GROWTH_MB = 400
TOKENS = (b"\x00", b"\xff\xfe", b"9" * 25, b"1e400", b"NaN", b"-", b",", b"[" * 200, b"\n")


@pytest.fixture(scope="module")
def captures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, list[str]]]:
    """Per kind: a working copy of the base capture and its files (relative paths)."""
    root = tmp_path_factory.mktemp("fuzz")
    out = {}
    for kind in KINDS:
        folder = make_base(kind, root / kind)
        rels = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
        out[kind] = (folder, rels)
    return out


def _mutate(data: st.DataObject, raw: bytes) -> bytes | None:
    """The mutated content of a file (None: delete it)."""
    op = data.draw(st.sampled_from(("flip", "insert", "token", "truncate", "delete")), "op")
    at = data.draw(st.integers(0, max(len(raw) - 1, 0)), "at")
    if op == "delete":
        return None
    if op == "truncate":
        return raw[:at]
    if op == "flip":
        mask = data.draw(st.binary(min_size=1, max_size=8), "mask")
        chunk = bytes(a ^ b for a, b in zip(raw[at : at + len(mask)], mask, strict=False))
        return raw[:at] + chunk + raw[at + len(chunk) :]
    if op == "insert":
        return raw[:at] + data.draw(st.binary(min_size=1, max_size=16), "bytes") + raw[at:]
    token = data.draw(st.sampled_from(TOKENS), "token")
    return raw[:at] + token + raw[at + len(token) :]


@settings(
    max_examples=EXAMPLES,
    derandomize="EGO_FUZZ_EXAMPLES" not in os.environ,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_a_mutated_capture_converts_or_fails_with_one_clear_error(captures, tmp_path_factory, data):
    kind = data.draw(st.sampled_from(KINDS), "kind")
    folder, rels = captures[kind]
    rel = data.draw(st.sampled_from(rels), "file")
    path = folder / rel
    original = path.read_bytes()
    mutated = _mutate(data, original)
    out = tmp_path_factory.mktemp("out") / "trajectory"
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    try:
        if mutated is None:
            path.unlink()
        else:
            path.write_bytes(mutated)
        try:
            write_trajectory(read_capture(kind, folder), out)
        except CaptureFormatError as exc:
            message = str(exc)
            assert message.startswith(f"capture '{kind}', file '"), message
            assert "\n" not in message
            assert not out.exists()
    finally:
        path.write_bytes(original)
        shutil.rmtree(out, ignore_errors=True)
    assert time.perf_counter() - start < SECONDS_PER_EXAMPLE
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024
    assert grown_mb < RSS_GROWTH_MB
