"""`fileio.json_bytes` and `fileio.compact_json_bytes`: the bytes ``json.dumps`` writes
(indented, compact), for every document."""

from __future__ import annotations

import json
import math
import random
import struct
from collections import OrderedDict
from dataclasses import dataclass

import pytest

from ego_assets.fileio import compact_json_bytes, json_bytes, json_loads


class Text(str):
    pass


class Number(int):
    pass


@dataclass
class Point:
    x: int


def _floats(rng: random.Random, n: int) -> list[float]:
    """Floats of every magnitude: random bit patterns, powers of ten and their neighbours."""
    out = [struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0] for _ in range(n)]
    for k in range(-330, 310):
        v = 10.0**k if -324 < k < 309 else 5e-324
        out += [v, -v, math.nextafter(v, 0.0), math.nextafter(v, math.inf)]
    out += [0.0, -0.0, 1e-4, 9.9e-5, 1e-5, 1e16, 9999999999999998.0, 123456.789, 0.1]
    return out


DOCS = [
    {"a": [], "b": {}, "c": [1, {}, []], "d": None, "e": True, "f": False},
    {"text": "é ü 中 \U0001f600", "del": "\x7f", "ctl": "\x00\x01\x1f\n\t\r\b\f", "q": '"\\/'},
    {"nan": float("nan")},
    {"inf": [float("inf"), float("-inf")], "null": None},
    {"null": None, "tuple": (1, 2)},
    {"big": 2**70, "neg": -(2**63), "max": 2**64 - 1},
    {1: "int key", "2": "str key"},
    {"sub": Text("x"), "n": Number(3)},
    {"b": 1, "a": {"d": 2, "c": [3, {"f": 4, "e": 5}]}, "é": 1, "z": 2, "A": 3},
    OrderedDict([("z", 1), ("a", 2)]),
    {"tricky": 'a": 0.00001', "key: 1e5": 1, "s": "\n  1e5"},
    {"in text": "x,1e-7,[0.00001]:2.5e-05}", "e": [1e-7, "e", 2.5e-05], "esc": 'q\\"1e-7'},
    {"small": [0.00001, -0.000099, 1e-7, -1e-300], "big": [1e16, -1.5e300], "mean": 0.5},
    [[[[[[[[[[[[1]]]]]]]]]]]],
    "top",
    12,
    1e-7,
    [],
    {},
]


@pytest.mark.parametrize("doc", DOCS, ids=range(len(DOCS)))
@pytest.mark.parametrize("indent", [1, 2, 4])
@pytest.mark.parametrize("sort_keys", [False, True])
def test_json_bytes_is_what_json_dumps_writes(doc, indent, sort_keys):
    try:
        want = json.dumps(doc, indent=indent, sort_keys=sort_keys).encode()
    except TypeError:
        with pytest.raises(TypeError):
            json_bytes(doc, indent=indent, sort_keys=sort_keys)
        return
    assert json_bytes(doc, indent=indent, sort_keys=sort_keys) == want


def test_json_bytes_floats_of_every_magnitude():
    rng = random.Random(7)
    floats = _floats(rng, 20_000)
    for indent in (1, 2):
        assert json_bytes(floats, indent=indent) == json.dumps(floats, indent=indent).encode()
        for x in floats[:3000] + floats[-2600:]:
            doc = {"v": x, "w": [x]}
            assert json_bytes(doc, indent=indent) == json.dumps(doc, indent=indent).encode()


@pytest.mark.parametrize("doc", DOCS, ids=range(len(DOCS)))
@pytest.mark.parametrize("sort_keys", [False, True])
def test_compact_json_bytes_is_what_json_dumps_writes(doc, sort_keys):
    try:
        want = json.dumps(doc, separators=(",", ":"), sort_keys=sort_keys).encode()
    except TypeError:
        with pytest.raises(TypeError):
            compact_json_bytes(doc, sort_keys=sort_keys)
        return
    assert compact_json_bytes(doc, sort_keys=sort_keys) == want


def test_compact_json_bytes_floats_of_every_magnitude_beside_look_alike_text():
    rng = random.Random(11)
    floats = _floats(rng, 20_000)
    compact = {"separators": (",", ":")}
    assert compact_json_bytes(floats) == json.dumps(floats, **compact).encode()
    texts = ["1e-7", "a,1e-07]", "0.00001", ":0.000099,", "[2.5e-5}", "mean", "e"]
    for x in floats[:3000] + floats[-2600:]:
        doc = {"v": x, "w": [x, rng.choice(texts)], rng.choice(texts): [[x], {"e": x}]}
        assert compact_json_bytes(doc) == json.dumps(doc, **compact).encode()


def test_json_bytes_floats_beside_look_alike_text_in_every_indentation():
    rng = random.Random(13)
    floats = _floats(rng, 2_000)
    texts = ["1e-7", "a,1e-07]", "0.00001", ":0.000099,", "[2.5e-5}", "mean", "e", "x\n  1e-5"]
    for x in floats[:1500] + floats[-1500:]:
        doc = {"v": x, "w": [x, rng.choice(texts)], rng.choice(texts): [[x], {"e": x}]}
        for indent in (1, 2, 4):
            want = json.dumps(doc, indent=indent, sort_keys=True).encode()
            assert json_bytes(doc, indent=indent, sort_keys=True) == want


def test_json_bytes_prints_small_floats_without_the_standard_library(monkeypatch):
    """A quality report holds floats below 1e-4 (a timing spread): orjson writes the
    indented document and only those are printed again."""
    doc = {"dt_cv": 3.2e-05, "streams": [{"gap": [1e-07, 0.25]}, {"e": -4.2e-300}]}
    want = {i: json.dumps(doc, indent=i, sort_keys=True).encode() for i in (2, 4)}
    monkeypatch.setattr(json, "dumps", lambda *a, **k: pytest.fail("json.dumps"))
    assert {i: json_bytes(doc, indent=i, sort_keys=True) for i in (2, 4)} == want


def test_json_bytes_deep_and_dataclass():
    deep: list = []
    for _ in range(200):
        deep = [deep]
    assert json_bytes(deep, indent=1) == json.dumps(deep, indent=1).encode()
    with pytest.raises(TypeError):
        json_bytes({"p": Point(1)})
    with pytest.raises(ValueError):
        json_bytes({}, indent=0)


@pytest.mark.parametrize(
    "text",
    [
        '{"a": [1, 2.5, -0.0, 1e-07, 1e+16], "b": "\\u00e9"}',
        "[NaN, Infinity, -Infinity]",
        '{"big": 123456789012345678901234567890}',
        '"\\ud800"',
        '{"a": 1, "a": 2}',
        "[1234567890123456789, -98765432109876543210, 0.0073738908395171165]",
        '{"e": [1e-1234567890123456789, 12345678901234567890.5, "x1234567890123456789"]}',
    ],
)
def test_json_loads_reads_what_json_reads(text):
    want, got = json.loads(text), json_loads(text.encode())
    assert json.dumps(got) == json.dumps(want)
    with pytest.raises(ValueError):
        json_loads(b"{not json")


def test_json_loads_long_fractions_stay_with_orjson(monkeypatch):
    """Digits of a fraction or an exponent are no integer past 64 bits: such a document
    (LeRobot stats are full of them) is not handed to the standard library."""
    text = b'{"min": [-0.0073738908395171165, 1.2345678901234567e-19], "count": [2400]}'
    want = json.loads(text)
    monkeypatch.setattr(json, "loads", lambda raw: pytest.fail(f"json.loads({raw!r})"))
    assert json_loads(text) == want
    assert json_loads(text.decode()) == want


def test_compact_json_bytes_prints_small_floats_without_the_standard_library(monkeypatch):
    """LeRobot stats hold a few floats below 1e-4: orjson writes the document and only
    those are printed again, not the whole document by ``json.dumps``."""
    doc = {"std": [8.880666472881179e-05, 0.25, 1e-07, -4.2e-300], "count": [300]}
    want = json.dumps(doc, separators=(",", ":")).encode()
    monkeypatch.setattr(json, "dumps", lambda *a, **k: pytest.fail("json.dumps"))
    assert compact_json_bytes(doc) == want


def test_json_lines_read_as_json_reads_each_line(tmp_path):
    """A capture's JSON Lines go through orjson where it reads them as json does: the same
    records and line numbers as `json.loads` line by line (BOM, CRLF, blank lines, NaN, an
    integer past 64 bits in one line), and a bad line named as before."""
    from ego_assets.capture.files import CaptureFiles
    from ego_assets.errors import CaptureFormatError

    lines = [
        '{"slot": 0, "t_ms": 0.0073738908395171165, "p": [1e-07, -0.0, 2.5]}',
        "",
        '{"slot": 1, "v": NaN, "w": [Infinity, -Infinity]}\r',
        '{"slot": 2, "big": 123456789012345678901234567890, "s": "\\u00e9"}',
        "   ",
        '{"slot": 3, "a": 1, "a": 2}',
    ]
    (tmp_path / "j.jsonl").write_bytes(b"\xef\xbb\xbf" + "\n".join(lines).encode() + b"\n")
    files = CaptureFiles("cap", tmp_path)
    records, numbers = files.read_json_lines("j.jsonl")
    assert numbers == [1, 3, 4, 6]
    want = [json.loads(lines[i - 1]) for i in numbers]
    assert json.dumps(records) == json.dumps(want)
    assert type(records[2]["big"]) is int
    (tmp_path / "bad.jsonl").write_text('{"slot": 0}\n{"slot": 1,}\n')
    with pytest.raises(CaptureFormatError, match="malformed JSON line") as err:
        files.read_json_lines("bad.jsonl")
    assert err.value.row == 2
