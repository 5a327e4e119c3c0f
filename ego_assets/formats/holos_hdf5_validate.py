"""Check a ``.h5`` file against the Holos HDF5 format (HolosCapture-1.0).

`validate_file` returns every deviation as one line naming the object and what is wrong
(an empty list means the file conforms); ``ego-assets validate FILE.h5`` prints them.
It checks what the writer promises (docs/formats/holos-hdf5.md): root attributes and
scales, robomimic's ``/data`` and ``/mask``, the demo's clock, shapes against their
scales, CF attributes, filters on everything that is not tiny, variable-length UTF-8
strings, Image spec attributes, tagged opaque media and a self-contained file.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from ego_assets.formats.holos_writer import (
    CONVENTION_VERSION,
    CONVENTIONS,
    ENV_NAME,
    ENV_TYPE_NO_SIMULATOR,
    IMAGE_UV,
    POSE_COMPONENTS,
    PURE_DIM,
    TINY_BYTES,
)

ROOT_ATTRS = (
    "Conventions",
    "title",
    "institution",
    "source",
    "history",
    "references",
    "capture_id",
    "organization_id",
    "modality",
    "capture_start",
    "holos_convention_version",
)
DEMO_ATTRS = (
    "num_samples",
    "frame",
    "handedness",
    "up_axis",
    "quaternion_order",
    "length_unit",
    "master_clock",
    "resampling",
)
IMAGE_ATTRS = {
    "CLASS": "IMAGE",
    "IMAGE_VERSION": "1.2",
    "IMAGE_SUBCLASS": "IMAGE_TRUECOLOR",
    "INTERLACE_MODE": "INTERLACE_PIXEL",
}
AXIS_LABELS = ("pose_component", "joint", "tracked_object", "axis_xyz", "landmark", "image_uv")
VIDEO_ATTRS = ("codec", "width", "height", "fps", "duration_s")
AUDIO_ATTRS = ("sample_rate_hz", "channels")
TIME_UNITS = re.compile(r"seconds since \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")
# obs key pattern -> (trailing scale names, units)
OBS_LAYOUT: tuple[tuple[re.Pattern[str], tuple[str, ...], str], ...] = (
    (re.compile(r"timestamp"), (), "s"),
    (re.compile(r"device_pose"), ("pose_component",), "m"),
    (re.compile(r"hand_(left|right)_joints_(world|local)"), ("joint", "pose_component"), "m"),
    (re.compile(r"object_pose"), ("tracked_object", "pose_component"), "m"),
    (re.compile(r"hand_(left|right)_landmarks_3d"), ("landmark", "axis_xyz"), "m"),
    (re.compile(r"hand_(left|right)_landmarks_confidence"), ("landmark",), "1"),
    (re.compile(r"imu_accel"), ("axis_xyz",), "m s-2"),
    (re.compile(r"imu_gyro"), ("axis_xyz",), "rad s-1"),
    (re.compile(r".+_frame_index"), (), "1"),
)


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, np.ndarray) and value.shape == ():
        return _text(value[()])
    return str(value)


def _scale_names(ds: h5py.Dataset) -> list[list[str]]:
    return [[s.name for s in ds.dims[i].values()] for i in range(ds.ndim)]


def _is_scale(ds: h5py.Dataset) -> bool:
    return bool(h5py.h5ds.is_scale(ds.id))


def _is_pure_dim(ds: h5py.Dataset) -> bool:
    return _is_scale(ds) and _text(ds.attrs.get("NAME", b"")).startswith(PURE_DIM)


def _type_class(ds: h5py.Dataset) -> int:
    return int(ds.id.get_type().get_class())


def _is_vlen_string(ds: h5py.Dataset) -> bool:
    return (
        h5py.check_string_dtype(ds.dtype) is not None
        and h5py.check_vlen_dtype(ds.dtype) is not None
    )


class _Checker:
    def __init__(self, f: h5py.File) -> None:
        self.f = f
        self.problems: list[str] = []

    def bad(self, where: str, what: str) -> None:
        self.problems.append(f"{where}: {what}")

    def need(self, obj: h5py.HLObject, path: str) -> Any:
        if path not in obj:
            self.bad(f"{obj.name.rstrip('/')}/{path}".replace("//", "/"), "missing")
            return None
        return obj[path]

    def attrs(self, obj: h5py.HLObject, names: tuple[str, ...]) -> None:
        for name in names:
            if name not in obj.attrs:
                self.bad(obj.name, f"attribute {name!r} missing")

    # ---------------------------------------------------------------- file level

    def run(self) -> list[str]:
        f = self.f
        self.attrs(f, ROOT_ATTRS)
        if _text(f.attrs.get("Conventions", "")) != CONVENTIONS:
            self.bad("/", f"Conventions must be {CONVENTIONS!r}")
        if _text(f.attrs.get("holos_convention_version", "")) != CONVENTION_VERSION:
            self.bad("/", f"holos_convention_version must be {CONVENTION_VERSION!r}")
        self.root_scales()
        self.robomimic()
        demo = self.f.get("data/demo_0")
        if isinstance(demo, h5py.Group):
            self.demo(demo)
        self.every_object()
        return self.problems

    def root_scales(self) -> None:
        expected = {"pose_component": POSE_COMPONENTS, "axis_xyz": ("x", "y", "z")}
        if "image_uv" in self.f:
            expected["image_uv"] = IMAGE_UV
        for name, values in expected.items():
            ds = self.need(self.f, name)
            if ds is None:
                continue
            got = tuple(_text(v) for v in ds[...])
            if got != values:
                self.bad(ds.name, f"values {got}, expected {values}")
        for name in (
            "pose_component",
            "joint",
            "tracked_object",
            "axis_xyz",
            "landmark",
            "image_uv",
        ):
            if name in self.f and not _is_scale(self.f[name]):
                self.bad(f"/{name}", "not a dimension scale")
        if "joint" in self.f and _text(self.f["joint"].attrs.get("joint_set", "")) == "arkit27":
            names = [_text(v) for v in self.f["joint"][...]]
            if len(names) != 26 or "forearmWrist" not in names or "forearmArm" in names:
                self.bad("/joint", "the ARKit joint scale must hold 26 names without forearmArm")
            if _text(self.f["joint"].attrs.get("omitted_joints", "")) != "forearmArm":
                self.bad("/joint", "attribute omitted_joints must name forearmArm")

    def robomimic(self) -> None:
        data = self.need(self.f, "data")
        if data is None:
            return
        for key in data:
            if not re.fullmatch(r"demo_\d+", key) or not isinstance(data[key], h5py.Group):
                self.bad(f"/data/{key}", "only demo_<int> groups may live in /data")
        self.attrs(data, ("total", "env_args"))
        try:
            env = json.loads(_text(data.attrs.get("env_args", "{}")))
        except json.JSONDecodeError as exc:
            self.bad("/data", f"env_args is not JSON: {exc}")
            env = {}
        if env.get("env_name") != ENV_NAME:
            self.bad("/data", f"env_args.env_name must be {ENV_NAME!r}")
        if env.get("type") != ENV_TYPE_NO_SIMULATOR:
            self.bad("/data", f"env_args.type must be {ENV_TYPE_NO_SIMULATOR}")
        if not isinstance(env.get("env_kwargs"), dict):
            self.bad("/data", "env_args.env_kwargs must be an object (the capture metadata)")
        mask = self.need(self.f, "mask/all")
        if mask is not None:
            if [_text(v) for v in mask[...]] != ["demo_0"]:
                self.bad("/mask/all", "must list demo_0")
            if not _is_vlen_string(mask):
                self.bad("/mask/all", "strings must be variable-length UTF-8")

    def demo(self, demo: h5py.Group) -> None:
        self.attrs(demo, DEMO_ATTRS)
        time = self.need(demo, "time")
        if time is None:
            return
        n = time.shape[0]
        if int(demo.attrs.get("num_samples", -1)) != n:
            self.bad(demo.name, f"num_samples {demo.attrs.get('num_samples')} != len(time) {n}")
        if int(self.f["data"].attrs.get("total", -1)) != n:
            self.bad("/data", f"total {self.f['data'].attrs.get('total')} != {n} samples")
        self.time(time)
        ts = self.need(demo, "timestamp_ns")
        if ts is not None and (ts.dtype != np.int64 or ts.shape != (n,)):
            self.bad(ts.name, f"must be int64 [{n}], is {ts.dtype} {ts.shape}")
        if n > 1 and not np.all(np.diff(time[...]) > 0):
            self.bad(time.name, "not strictly increasing")
        obs = self.need(demo, "obs")
        if obs is not None:
            self.obs(obs, time)
        actions = self.need(demo, "actions")
        if actions is not None:
            self.actions(actions, n)
        states = self.need(demo, "states")
        if states is not None and (states.ndim != 2 or states.shape[0] != n):
            self.bad(states.name, f"must be [T={n}, S], is {states.shape}")
        steps = self.f.get("holos/events/procedure_steps")
        if isinstance(steps, h5py.Dataset):
            self.steps(steps, n)

    def time(self, time: h5py.Dataset) -> None:
        if time.dtype != np.float64 or not _is_scale(time):
            self.bad(time.name, "must be a float64 dimension scale")
        units = _text(time.attrs.get("units", ""))
        if not TIME_UNITS.fullmatch(units):
            self.bad(time.name, f"units {units!r} are not 'seconds since <ISO-8601 UTC>'")
        if _text(time.attrs.get("calendar", "")) != "proleptic_gregorian":
            self.bad(time.name, "calendar must be proleptic_gregorian")

    def obs(self, obs: h5py.Group, time: h5py.Dataset) -> None:
        n = time.shape[0]
        if "timestamp" in obs and not np.array_equal(obs["timestamp"][...], time[...]):
            self.bad(obs["timestamp"].name, "differs from time")
        for key, ds in obs.items():
            if not isinstance(ds, h5py.Dataset):
                self.bad(ds.name, "obs keys must be datasets directly under obs")
                continue
            if key in AXIS_LABELS:
                self.axis_labels(ds, key)
                continue
            if ds.shape[:1] != (n,):
                self.bad(ds.name, f"first axis must be T={n}, shape is {ds.shape}")
            layout = next((entry for entry in OBS_LAYOUT if entry[0].fullmatch(key)), None)
            if layout is None:
                self.bad(ds.name, "not an obs key of the format")
                continue
            _, trailing, units = layout
            names = _scale_names(ds)
            want = [[time.name], *[[f"/{t}"] for t in trailing]]
            if names != want:
                self.bad(ds.name, f"scales {names}, expected {want}")
            if _text(ds.attrs.get("units", "")) != units:
                self.bad(ds.name, f"units must be {units!r}")

    def axis_labels(self, ds: h5py.Dataset, key: str) -> None:
        root = self.f.get(key)
        if not isinstance(root, h5py.Dataset):
            self.bad(ds.name, f"axis labels without the root scale /{key}")
        elif [_text(v) for v in ds[...]] != [_text(v) for v in root[...]]:
            self.bad(ds.name, f"labels differ from /{key}")

    def actions(self, actions: h5py.Dataset, n: int) -> None:
        if actions.ndim != 2 or actions.shape[0] != n or actions.shape[1] not in (3, 7):
            self.bad(actions.name, f"must be [T={n}, 7] or [T, 3], is {actions.shape}")
            return
        self.attrs(actions, ("derivation", "source_hand"))
        values = actions[...]
        if not np.isfinite(values).all():
            self.bad(actions.name, "must be NaN-free")
        if n and actions.shape[1] == 7 and not np.allclose(values[-1], [0, 0, 0, 0, 0, 0, 1]):
            self.bad(actions.name, "last row must be the identity delta")

    def steps(self, steps: h5py.Dataset, n: int) -> None:
        fields = ("index", "step_id", "title", "t_start", "t_end", "start_sample", "end_sample")
        names = steps.dtype.names or ()
        if tuple(names) != fields:
            self.bad(steps.name, f"fields {names}, expected {fields}")
            return
        table = steps[...]
        if np.any(table["start_sample"] > table["end_sample"]) or np.any(table["end_sample"] > n):
            self.bad(steps.name, f"sample ranges must satisfy 0 <= start <= end <= {n}")

    # -------------------------------------------------------------- every object

    def every_object(self) -> None:
        objects: list[tuple[str, Any]] = []
        self.f.visititems(lambda name, obj: objects.append((name, obj)))
        for name, obj in objects:
            link = self.f.get(name, getlink=True)
            if isinstance(link, h5py.ExternalLink):
                self.bad(f"/{name}", "external link: the file must be self-contained")
            if isinstance(obj, h5py.Datatype):
                self.bad(f"/{name}", "committed datatype (breaks h5netcdf)")
            if isinstance(obj, h5py.Dataset):
                self.dataset(obj)

    def dataset(self, ds: h5py.Dataset) -> None:
        if ds.is_virtual:
            for vmap in ds.virtual_sources():
                if vmap.file_name != ".":
                    self.bad(ds.name, f"virtual source in another file {vmap.file_name!r}")
        if _is_pure_dim(ds):
            return
        self.scales(ds)
        klass = _type_class(ds)
        if klass == h5py.h5t.OPAQUE:
            self.opaque(ds)
        elif klass == h5py.h5t.STRING and not _is_vlen_string(ds):
            self.bad(ds.name, "strings must be variable-length UTF-8")
        elif klass in (h5py.h5t.FLOAT, h5py.h5t.INTEGER) and not _is_scale(ds):
            self.numeric(ds)
        if _text(ds.attrs.get("CLASS", "")) == "IMAGE":
            for key, value in IMAGE_ATTRS.items():
                if _text(ds.attrs.get(key, "")) != value:
                    self.bad(ds.name, f"Image spec attribute {key} must be {value!r}")
        filterable = klass != h5py.h5t.STRING and h5py.check_vlen_dtype(ds.dtype) is None
        if filterable and ds.dtype.names is None and not ds.is_virtual:
            nbytes = ds.size * ds.dtype.itemsize
            if nbytes >= TINY_BYTES and not (
                ds.chunks and ds.compression == "gzip" and ds.shuffle and ds.fletcher32
            ):
                self.bad(ds.name, f"{nbytes} bytes without chunked gzip + shuffle + Fletcher-32")

    def scales(self, ds: h5py.Dataset) -> None:
        if _is_scale(ds) or ds.ndim == 0:
            return
        names = _scale_names(ds)
        counts = [len(n) for n in names]
        if any(counts) and not all(c == 1 for c in counts):
            self.bad(ds.name, f"every axis needs exactly one scale or none has any: {names}")
            return
        in_cf_group = ds.name.startswith(("/data/", "/holos/raw/", "/media/"))
        if not any(counts):
            if in_cf_group:
                self.bad(ds.name, "axes without dimension scales")
            return
        parent = ds.name.rsplit("/", 1)[0] or "/"
        for axis in range(ds.ndim):
            scale = ds.dims[axis][0]
            if scale.shape[0] != ds.shape[axis]:
                self.bad(
                    ds.name,
                    f"axis {axis} has {ds.shape[axis]}, scale {scale.name} {scale.shape[0]}",
                )
            scale_parent = scale.name.rsplit("/", 1)[0] or "/"
            if not (parent == scale_parent or parent.startswith(scale_parent.rstrip("/") + "/")):
                self.bad(ds.name, f"scale {scale.name} is not in its group or an ancestor")

    def numeric(self, ds: h5py.Dataset) -> None:
        if ds.name in ("/mask/all",):
            return
        for key in ("units", "long_name"):
            if key not in ds.attrs:
                self.bad(ds.name, f"CF attribute {key!r} missing")
        if ds.dtype.kind == "f" and ds.name != "/data/demo_0/actions":
            fill = ds.attrs.get("_FillValue")
            if fill is None or not np.isnan(fill) or np.asarray(fill).dtype != ds.dtype:
                self.bad(ds.name, "_FillValue must be NaN of the dataset's type")

    def opaque(self, ds: h5py.Dataset) -> None:
        tag = ds.id.get_type().get_tag().decode("ascii", "replace")
        if "/" not in tag:
            self.bad(ds.name, f"opaque tag {tag!r} is not a MIME type")
        if ds.name.startswith("/media/"):
            wanted = AUDIO_ATTRS if tag.startswith("audio/") else VIDEO_ATTRS
            for key in wanted:
                if key not in ds.attrs:
                    self.bad(ds.name, f"media attribute {key!r} missing")


def validate_file(path: str | Path) -> list[str]:
    """Every deviation of ``path`` from the format, one line each (empty: conforms)."""
    try:
        with h5py.File(path, "r") as f:
            return _Checker(f).run()
    except OSError as exc:
        return [f"{path}: not a readable HDF5 file ({exc})"]


def is_hdf5(path: str | Path) -> bool:
    """Whether ``path`` is a file carrying the HDF5 signature."""
    p = Path(path)
    return p.is_file() and h5py.is_hdf5(p)
