"""The safetensors format: an 8-byte header length, a JSON header, the raw bytes."""
import json
import os
import struct

import numpy as np

from .. import _dtype
from .._backends import backend
from .._device import CPU, to_device
from .._tensor import Tensor
from ._load import _move, _read_into
from ._save import _atomic_write
from ._unpickler import _rebuild_meta_tensor_no_storage

_ST_NAMES = {"bool": "BOOL", "uint8": "U8", "int8": "I8", "int16": "I16", "int32": "I32",
             "int64": "I64", "float16": "F16", "bfloat16": "BF16", "float32": "F32",
             "float64": "F64", "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2",
             "float8_e4m3fnuz": "F8_E4M3FNUZ", "float8_e5m2fnuz": "F8_E5M2FNUZ",
             "float8_e8m0fnu": "F8_E8M0", "complex64": "C64", "uint16": "U16", "uint32": "U32", "uint64": "U64"}
_ST_DTYPES = {v: _dtype._BY_NAME[k] for k, v in _ST_NAMES.items()}
_ST_MAX_HEADER = 100_000_000      # the safetensors package's own limit


def save_safetensors(tensors, path, metadata=None):
    """Write a dict of tensors to ``path`` in the safetensors format (atomically).

    The file is an 8-byte little-endian header length, a JSON header mapping each name to its
    ``dtype``, ``shape`` and ``data_offsets``, then the raw bytes. Views are written as copies.

    Args:
        tensors (dict[str, Tensor]): what to save; dtypes as in ``_ST_NAMES`` (no complex128).
        path: file path.
        metadata (dict[str, str], optional): stored under ``__metadata__``.

    Example:
        >>> import os, tempfile, ember
        >>> from ember.serialization import load_safetensors, save_safetensors
        >>> with tempfile.TemporaryDirectory() as d:
        ...     save_safetensors({"w": ember.ones(2, 2)}, os.path.join(d, "m.safetensors"))
        ...     load_safetensors(os.path.join(d, "m.safetensors"))["w"].shape
        torch.Size([2, 2])
    """
    if metadata is not None and not all(isinstance(k, str) and isinstance(v, str)
                                        for k, v in metadata.items()):
        raise TypeError("save_safetensors: metadata must be a dict of str to str")
    header, arrays, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = dict(metadata)
    # Biggest elements first keeps every tensor aligned to its element size, as safetensors does.
    for name, t in sorted(tensors.items(), key=lambda kv: (-kv[1].dtype.itemsize, kv[0])):
        if not isinstance(t, Tensor):
            raise TypeError(f"save_safetensors: {name!r} is a {type(t).__name__}, not a Tensor")
        if t.dtype.name not in _ST_NAMES:
            raise TypeError(f"save_safetensors: {name!r} has dtype {t.dtype}, which the "
                            "safetensors format cannot store")
        a = np.ascontiguousarray(backend(t.device).to_host(t._data)).reshape(-1)
        header[name] = {"dtype": _ST_NAMES[t.dtype.name], "shape": list(t.shape),
                        "data_offsets": [offset, offset + a.nbytes]}
        arrays.append(a.view(np.uint8))
        offset += a.nbytes
    js = json.dumps(header, separators=(",", ":")).encode()
    js += b" " * (-len(js) % 8)        # the data then starts 8-byte aligned

    def write(fh):
        fh.write(struct.pack("<Q", len(js)) + js)
        for a in arrays:
            fh.write(memoryview(a))
    _atomic_write(path, write)


def load_safetensors(path, device="cpu"):
    """Read a safetensors file (ember's or the ``safetensors`` package's) into a dict of
    tensors.

    Args:
        path: file path.
        device (default ``"cpu"``): where the tensors go; ``"meta"`` gives shapes and dtypes.

    Example: see :func:`save_safetensors`.
    """
    dev = to_device(device)
    out = {}
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        (n,) = struct.unpack("<Q", fh.read(8))
        if n > min(_ST_MAX_HEADER, size - 8):
            raise ValueError(f"load_safetensors: {path}: header of {n} bytes is too large")
        header = json.loads(fh.read(n))
        header.pop("__metadata__", None)
        base, data_size = 8 + n, size - 8 - n
        for name, info in header.items():
            dt = _ST_DTYPES.get(info["dtype"])
            if dt is None:
                raise TypeError(f"load_safetensors: {name!r} has dtype {info['dtype']}, which "
                                "ember does not support")
            begin, end = info["data_offsets"]
            shape = tuple(info["shape"])
            if not 0 <= begin <= end <= data_size or \
                    end - begin != int(np.prod(shape)) * dt.itemsize:
                raise ValueError(f"load_safetensors: {name!r}: data_offsets {[begin, end]} do "
                                 f"not fit shape {list(shape)} of {info['dtype']} in "
                                 f"{data_size} bytes of data")
            if dev.type == "meta":                  # shapes and dtypes only: read nothing
                out[name] = _rebuild_meta_tensor_no_storage(dt, shape, None, False)
                continue
            arr = np.empty(shape, dt.np)
            fh.seek(base + begin)
            _read_into(fh, arr, f"load_safetensors: {name!r}")
            t = Tensor._wrap(arr)
            out[name] = t if dev == CPU else _move(t, dev)
    return out
