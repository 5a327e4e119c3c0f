"""JSON round trip for the frozen dataclasses of the canonical model.

`to_jsonable` turns a dataclass (nested dataclasses, tuples, mappings, scalars) into
plain JSON values; `from_jsonable` rebuilds it from the type hints, rejecting unknown
keys so a typo in a stored ``capture.json`` fails loudly instead of being dropped.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from functools import cache
from typing import Any, TypeVar

T = TypeVar("T")


def to_jsonable(value: Any) -> Any:
    """Plain JSON value for a dataclass, tuple, mapping or scalar."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [to_jsonable(v) for v in value]
    return value


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def from_jsonable(cls: type[T], data: Any) -> T:
    """Rebuild ``cls`` (a dataclass) from `to_jsonable` output."""
    return typing.cast(T, _decode(cls, data, cls.__name__))


def _decode(tp: Any, data: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if tp is Any:
        return data
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if data is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _decode(arg, data, where)
            except (TypeError, ValueError) as exc:
                errors.append(str(exc))
        raise ValueError(f"{where}: {data!r} matches none of {args}: {errors}")
    if dataclasses.is_dataclass(tp):
        if not isinstance(data, Mapping):
            raise TypeError(f"{where}: expected an object, got {type(data).__name__}")
        names = {f.name for f in dataclasses.fields(tp)}
        unknown = set(data) - names
        if unknown:
            raise ValueError(f"{where}: unknown keys {sorted(unknown)}")
        hints = _hints(typing.cast(type, tp))
        kwargs = {k: _decode(hints[k], v, f"{where}.{k}") for k, v in data.items()}
        return typing.cast(Any, tp)(**kwargs)
    if origin is tuple:
        args = typing.get_args(tp)
        if not isinstance(data, list | tuple):
            raise TypeError(f"{where}: expected a list, got {type(data).__name__}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_decode(args[0], v, f"{where}[{i}]") for i, v in enumerate(data))
        return tuple(
            _decode(a, v, f"{where}[{i}]") for i, (a, v) in enumerate(zip(args, data, strict=True))
        )
    if origin in (Mapping, dict, typing.Mapping) or tp is dict:
        args = typing.get_args(tp) or (str, Any)
        if not isinstance(data, Mapping):
            raise TypeError(f"{where}: expected an object, got {type(data).__name__}")
        return {str(k): _decode(args[1], v, f"{where}.{k}") for k, v in data.items()}
    if tp is float:
        if isinstance(data, bool) or not isinstance(data, int | float):
            raise TypeError(f"{where}: expected a number, got {data!r}")
        return float(data)
    if tp is int:
        if isinstance(data, bool) or not isinstance(data, int):
            raise TypeError(f"{where}: expected an integer, got {data!r}")
        return data
    if tp in (str, bool):
        if not isinstance(data, tp):
            raise TypeError(f"{where}: expected {tp.__name__}, got {data!r}")
        return data
    raise TypeError(f"{where}: unsupported type {tp!r}")
