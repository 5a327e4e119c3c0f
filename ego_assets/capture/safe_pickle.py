"""Read pickles from datasets without running them: containers, numbers, text and arrays only.

A pickle is a program: ``pickle.load`` calls whatever global the file names (``os.system``
included). `load_data_pickle` runs an unpickler whose ``find_class`` allows only the
builtins containers, numbers and strings and what NumPy needs to rebuild an ndarray or a
scalar (`ALLOWED`); any other global is refused with a `CaptureFormatError` naming it,
before it is imported or called, so nothing of the file runs.
"""

from __future__ import annotations

import io
import pickle
from typing import Any

from ego_assets.capture.files import CaptureFiles
from ego_assets.errors import CaptureFormatError

MAX_PICKLE_BYTES = 1 << 30

_NUMPY = (
    "numpy.core.multiarray",
    "numpy._core.multiarray",
    "numpy.core.numeric",
    "numpy._core.numeric",
)
ALLOWED: frozenset[tuple[str, str]] = frozenset(
    {
        *(
            ("builtins", name)
            for name in (
                "dict", "list", "tuple", "set", "frozenset", "int", "float", "complex",
                "bool", "str", "bytes", "bytearray", "slice", "range",
            )
        ),
        ("collections", "OrderedDict"),
        ("_codecs", "encode"),  # bytes of protocol 0-2 pickles
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        *((module, "_reconstruct") for module in _NUMPY),
        *((module, "scalar") for module in _NUMPY),
        *((module, "_frombuffer") for module in _NUMPY),
    }
)  # fmt: skip


class _DataUnpickler(pickle.Unpickler):
    def __init__(self, data: bytes, files: CaptureFiles, rel: str) -> None:
        super().__init__(io.BytesIO(data))
        self._files, self._rel = files, rel

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in ALLOWED:
            raise self._files.error(
                self._rel,
                f"pickle refers to {module}.{name}; only containers, numbers, strings and "
                "numpy arrays are read (nothing in the file was run)",
                field=f"{module}.{name}",
            )
        return super().find_class(module, name)

    def persistent_load(self, pid: Any) -> Any:
        raise self._files.error(self._rel, "pickle uses persistent ids; not plain data")


def load_data_pickle(files: CaptureFiles, rel: str) -> Any:
    """The plain data in the pickle ``rel`` (see the module docstring).

    Raises:
        CaptureFormatError: a refused global, a truncated or corrupt pickle, or a file
            over `MAX_PICKLE_BYTES`; names the file (and the global as the field).
    """
    path = files.path(rel)
    if path.stat().st_size > MAX_PICKLE_BYTES:
        raise files.error(rel, f"pickle is over {MAX_PICKLE_BYTES} bytes")
    data = path.read_bytes()
    try:
        return _DataUnpickler(data, files, rel).load()
    except CaptureFormatError:
        raise
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError) as exc:
        raise files.error(rel, f"not a readable pickle: {type(exc).__name__}: {exc}") from None
