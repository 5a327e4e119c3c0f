"""`ego_assets.capture.npz`: arrays read exactly, headers checked before any data."""

from __future__ import annotations

import numpy as np
import pytest

from ego_assets.capture.files import CaptureFiles
from ego_assets.capture.npz import ArrayHeader, open_npz
from ego_assets.errors import CaptureFormatError


def _files(tmp_path, **arrays) -> CaptureFiles:
    np.savez(tmp_path / "a.npz", **arrays)
    return CaptureFiles("cap-npz", tmp_path)


def test_c_fortran_and_big_endian_arrays_read_exactly(tmp_path):
    values = np.arange(24, dtype=np.float64).reshape(2, 3, 4)
    files = _files(
        tmp_path,
        c=values,
        f=np.asfortranarray(values),
        be=values.astype(">f4"),
        flags=values > 10,
    )
    with open_npz(files, "a.npz") as npz:
        assert npz.names == ["be", "c", "f", "flags"]
        for name in ("c", "f", "be"):
            arr = npz.read(name)
            assert arr.shape == (2, 3, 4)
            assert arr.tolist() == values.tolist()
        assert npz.read("flags").tolist() == (values > 10).tolist()
        header = npz.header("be")
        assert (header.shape, header.dtype, header.nbytes) == ((2, 3, 4), np.dtype(">f4"), 96)


def test_the_check_sees_the_header_before_the_data_is_read(tmp_path):
    files = _files(tmp_path, big=np.zeros((1000, 50), np.float32))
    seen: list[ArrayHeader] = []

    def refuse(header: ArrayHeader) -> None:
        seen.append(header)
        raise files.error("a.npz", "refused from the header", field=header.name)

    with open_npz(files, "a.npz") as npz, pytest.raises(CaptureFormatError) as info:
        npz.read("big", refuse)
    assert [(h.shape, h.nbytes) for h in seen] == [((1000, 50), 200_000)]
    assert (info.value.file, info.value.field) == ("a.npz", "big")


def test_missing_and_pickled_arrays_are_named(tmp_path):
    files = _files(tmp_path, obj=np.array([{"a": 1}], dtype=object))
    with open_npz(files, "a.npz") as npz:
        with pytest.raises(CaptureFormatError, match="array is missing"):
            npz.read("nope")
        with pytest.raises(CaptureFormatError, match="pickles"):
            npz.read("obj")
