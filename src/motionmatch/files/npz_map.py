"""Uncompressed .npz files read as memory maps (the database files, posedb/database.py)."""
from __future__ import annotations

import math

import numpy as np


class NpzError(ValueError):
    """A member that cannot be mapped; the message names the file and member."""


def map_npz(path) -> dict:
    """Arrays of an uncompressed .npz, memory-mapped read-only: opening a 500 MB database costs
    milliseconds (zipfile's CRC check alone would take 0.2 s), and pages load as they are used."""
    import zipfile
    out = {}
    with zipfile.ZipFile(path) as zf, open(path, "rb") as f:
        for info in zf.infolist():
            if info.compress_type != zipfile.ZIP_STORED or not info.filename.endswith(".npy"):
                raise NpzError(f"{path}: member {info.filename} is compressed; rebuild the database")
            f.seek(info.header_offset)
            local = f.read(30)
            name_len = int.from_bytes(local[26:28], "little")
            extra_len = int.from_bytes(local[28:30], "little")
            f.seek(info.header_offset + 30 + name_len + extra_len)
            version = np.lib.format.read_magic(f)
            read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
                np.lib.format.read_array_header_2_0
            shape, fortran, dtype = read_header(f)
            offset = f.tell()
            name = info.filename[:-4]
            if dtype.hasobject:
                # An object array on disk is pickled pointers; mapped raw they crash the process.
                raise NpzError(f"{path}: member {name!r} holds Python objects ({dtype}); a motionmatch "
                                    f"database holds only numbers")
            if offset + math.prod(shape) * dtype.itemsize > info.header_offset + 30 + name_len + extra_len \
                    + info.file_size:
                raise NpzError(f"{path}: member {name!r}: shape {shape} is larger than its stored data")
            if math.prod(shape) == 0:
                out[name] = np.zeros(shape, dtype=dtype)
            else:
                # A plain ndarray view of the map: memmap's subclass hooks cost ~5 us per indexing,
                # which the runtime does many times a frame.
                out[name] = np.asarray(np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape,
                                                 order="F" if fortran else "C"))
    return out
