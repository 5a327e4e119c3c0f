"""The Holos writer's low-level HDF5 calls (`holos_h5`) write the bytes h5py's
high-level calls write for the same objects, attributes and scales, in the same order."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from ego_assets.formats import holos_h5
from ego_assets.formats.holos_clock import Rows
from ego_assets.formats.holos_h5 import H5Writer, next_row_view, write_attrs
from ego_assets.formats.holos_writer import PURE_DIM

ATTRS = {
    "units": "m",
    "long_name": "ünïcode text",
    "_FillValue": np.float64(np.nan),
    "ratio": 0.25,
    "count": 7,
    "total": np.int64(-3),
    "flag": np.int8(1),
    "small": np.float32(1.5),
    "boolean": True,  # h5py's own guessing (an enum)
    "sizes": [1, 2, 3],  # h5py's own guessing (an array)
}
TIME_ATTRS = {
    "units": "s",
    "long_name": "time since the capture start",
    "standard_name": "time",
    "axis": "T",
    "calendar": "proleptic_gregorian",
    "units_metadata": "leap_seconds: none",
}


def _vlen(group, name, values):
    return group.create_dataset(
        name, data=np.array(list(values), dtype=object), dtype=h5py.string_dtype()
    )


def _high_level(path):
    """The objects as h5py's high-level API writes them (the writer's former code)."""
    gzip = {"compression": "gzip", "compression_opts": 4, "shuffle": True, "fletcher32": True}
    with h5py.File(path, "w", track_order=False) as f:
        for key, value in ATTRS.items():
            f.attrs[key] = value
        f.attrs["units"] = "overwritten"
        scale = _vlen(f, "axis", ["a", "b", "c"])
        scale.make_scale("axis")
        group = f.create_group("g/obs", track_order=False)
        time = group.create_dataset(
            "time", data=np.arange(300, dtype=np.float64), chunks=(64,), **gzip
        )
        time.make_scale("time")
        for key, value in TIME_ATTRS.items():
            time.attrs[key] = value
        values = np.random.default_rng(0).normal(size=(300, 3))
        ds = group.create_dataset(
            "pose", shape=(300, 3), dtype=np.float64, chunks=(64, 3), fillvalue=np.nan, **gzip
        )
        for start in range(0, 300, 128):
            stop = min(start + 128, 300)
            ds.write_direct(values[start:stop], dest_sel=np.s_[start:stop])
        ds.dims[0].attach_scale(time)
        ds.dims[1].attach_scale(scale)
        ds.attrs["units"] = "m"
        ds.attrs["_FillValue"] = np.float64(np.nan)
        tiny = group.create_dataset("tiny", data=np.arange(3, dtype=np.int64))
        tiny.dims[0].attach_scale(scale)
        group.create_dataset("byte", shape=(5,), dtype=">f4").make_scale(f"{PURE_DIM}{5:10d}")
        _vlen(group, "empty", []).make_scale("empty")
        group.create_dataset("text", data="{}", dtype=h5py.string_dtype()).attrs["m"] = "j"
        del ds, tiny
        src = group["pose"]
        layout = h5py.VirtualLayout(src.shape, src.dtype, filename=f.filename)
        layout.dcpl.set_obj_track_times(False)
        source = h5py.VirtualSource(src)
        layout[:299] = source[1:300]
        layout[299] = source[299]
        view = f.create_group("next").create_virtual_dataset("pose", layout, fillvalue=np.nan)
        for axis in range(2):
            view.dims[axis].attach_scale(src.dims[axis][0])
        for name in ("units", "long_name", "_FillValue", "frame"):
            if name in src.attrs:
                view.attrs[name] = src.attrs[name]
        view.attrs["comment"] = "one row later"


def _low_level(path):
    with h5py.File(path, "w", track_order=False) as f:
        writer = H5Writer(f)
        write_attrs(f, ATTRS.items())
        write_attrs(f, [("units", "overwritten")])
        scale = writer.string_scale(f["/"], "axis", ["a", "b", "c"])
        group = writer.group("g/obs")
        time = writer.time_scale(group, np.arange(300, dtype=np.float64), "s")
        values = np.random.default_rng(0).normal(size=(300, 3))
        ds = writer._create(group, "pose", Rows((values,), np.dtype(np.float64)), fill=True)
        writer.attach(ds, [time, scale])
        writer.attrs(ds, units="m", _FillValue=np.float64(np.nan))
        tiny = writer._create(group, "tiny", np.arange(3, dtype=np.int64))
        writer.attach(tiny, [scale])
        writer.pure_dim(group, "byte", 5)
        writer.string_scale(group, "empty", [])
        writer.text(group, "text", "{}", m="j")
        del ds, tiny
        next_row_view(writer.group("next"), group, "pose", "/g/obs/pose", "one row later")


def test_the_low_level_calls_write_what_h5py_writes(tmp_path, monkeypatch):
    monkeypatch.setattr(holos_h5, "BLOCK_BYTES", 128 * 24)  # Rows in blocks of 128 rows
    high, low = tmp_path / "high.h5", tmp_path / "low.h5"
    _high_level(high)
    _low_level(low)
    with h5py.File(low) as f:  # what was written is there
        assert f.attrs["units"] == "overwritten" and list(f.attrs["sizes"]) == [1, 2, 3]
        np.testing.assert_array_equal(f["next/pose"][:-1], f["g/obs/pose"][1:])
        assert f["next/pose"].attrs["units"] == "m"
        assert f["next/pose"].dims[0][0] == f["g/obs/time"]
    assert high.read_bytes() == low.read_bytes()


def test_attach_checks_every_axis_against_its_scale(tmp_path):
    with h5py.File(tmp_path / "f.h5", "w") as f:
        writer = H5Writer(f)
        scale = writer.string_scale(f["/"], "axis", ["a", "b"])
        ds = writer._create(f["/"], "x", np.zeros((3, 2)))
        with pytest.raises(ValueError, match="1 scales"):
            writer.attach(ds, [scale])
        with pytest.raises(ValueError, match="axis 0 has 3 entries, scale /axis has 2"):
            writer.attach(ds, [scale, scale])
