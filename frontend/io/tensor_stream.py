"""Paddle's tensor stream: how ``save``, ``save_combine``, ``load`` and ``load_combine`` lay out a
LoDTensor in a file (Paddle 2.6.2, ``SerializeToStream`` in ``lod_tensor.cc`` and
``TensorToStream`` in ``tensor_util.cc``), byte for byte. All numbers are little-endian::

    uint32   LoDTensor version (0)
    uint64   number of LoD levels
    per level: uint64 byte size, then that many bytes of size_t (uint64) offsets
    uint32   tensor version (0)
    int32    byte size of the TensorDesc message
    bytes    TensorDesc (data_type, dims)
    bytes    the elements, C order, numel * element size

A combined parameters file (``.pdiparams``, ``__params__``) is such streams one after another,
in the order of the variables' names; a per-variable file holds one.

Reading never trusts a size it has not checked against what is left of the file: a header that
promises more bytes than the file holds is a :class:`TensorFormatError` before anything is
allocated. Nothing here unpickles: a pickle (Paddle's ``.pdparams`` checkpoints are pickles) is
recognised by its first bytes and refused with :class:`UnsafeFormatError`.
"""

from __future__ import annotations

import struct
from typing import BinaryIO, Sequence

import numpy as np

from ...ir import dtypes
from ...ir.errors import ParameterMismatchError, TensorFormatError, UnsafeFormatError
from ...lowering.lod_tensor import lod_problem
from ...proto import framework_pb2 as pb

TENSOR_VERSION = 0          # the only LoDTensor / Tensor version Paddle 2.6 writes or reads
MAX_DIMS = 64               # NumPy's limit on an array's dimensions (Paddle's own is 9)
_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")
_U64 = struct.Struct("<Q")


# -- writing -------------------------------------------------------------------------------------
def tensor_desc_bytes(dtype, shape: Sequence[int]) -> bytes:
    """The serialized ``VarType.TensorDesc`` of a tensor (what Paddle writes before the data)."""
    desc = pb.VarType.TensorDesc()
    desc.data_type = dtypes.to_enum(dtype)
    desc.dims.extend(int(d) for d in shape)
    return desc.SerializeToString(deterministic=True)


def write_tensor(out: BinaryIO, array, lod: Sequence[Sequence[int]] = ()) -> None:
    """Write ``array`` (with LoD offsets ``lod``) to ``out`` as one Paddle tensor stream."""
    array = np.asarray(array)
    name = dtypes.normalize(array.dtype)            # refuses element types Paddle has no number for
    want = dtypes.to_numpy(name).newbyteorder("<")
    data = np.asarray(array, dtype=want)
    if not data.flags.c_contiguous:
        data = data.copy(order="C")      # (np.ascontiguousarray would make a 0-D tensor 1-D)
    parts = [_U32.pack(TENSOR_VERSION), _U64.pack(len(lod))]
    for level in lod:
        offsets = np.asarray(level, dtype="<u8")
        parts += [_U64.pack(offsets.nbytes), offsets.tobytes()]
    desc = tensor_desc_bytes(name, data.shape)
    parts += [_U32.pack(TENSOR_VERSION), _I32.pack(len(desc)), desc]
    out.write(b"".join(parts))
    # Bytes through a uint8 view: a buffer of bfloat16 (ml_dtypes) cannot be cast by memoryview.
    out.write(memoryview(data.reshape(-1).view(np.uint8)) if data.size else b"")


def tensor_to_bytes(array, lod: Sequence[Sequence[int]] = ()) -> bytes:
    """One tensor stream as bytes (see :func:`write_tensor`)."""
    import io

    buf = io.BytesIO()
    write_tensor(buf, array, lod)
    return buf.getvalue()


# -- reading -------------------------------------------------------------------------------------
def describe_foreign(head: bytes) -> str | None:
    """What a file that is not a tensor stream is, judged by its first bytes (None: no idea)."""
    if len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5:
        return "pickle"
    if head.startswith(b"PK\x03\x04"):
        return "a zip archive (a .npz, .pdparams of another tool, or a PyTorch checkpoint)"
    if head.startswith(b"\x93NUMPY"):
        return "a NumPy .npy file"
    return None


def refuse_pickle(path: str, what: str = "a Paddle tensor file") -> UnsafeFormatError:
    """The error for a pickle handed in where ``what`` was expected."""
    return UnsafeFormatError(
        f"{path}: this file is a Python pickle, not {what}. Paddle's .pdparams/.pdopt checkpoints "
        "(paddle.save, paddle.static.save) and .pdiparams.info files are pickles; loading a pickle can "
        "run arbitrary code, so fluidjax never unpickles and cannot load it safely. Re-save the weights "
        "in Paddle's tensor format in a trusted process (paddle.static.save_inference_model, "
        "paddle.jit.save, or paddle.static.save_vars).", path=path)


class TensorReader:
    """Reads tensor streams from an open binary file whose size is known, checking each size
    against the bytes left before reading (and so before allocating) anything."""

    def __init__(self, f: BinaryIO, path: str, size: int) -> None:
        self._f = f
        self.path = path
        self.size = size
        self.pos = 0

    @property
    def remaining(self) -> int:
        """Bytes not read yet."""
        return self.size - self.pos

    def at_end(self) -> bool:
        """Whether every byte of the file has been read."""
        return self.pos >= self.size

    def _fail(self, variable: str | None, what: str) -> TensorFormatError:
        who = f" (variable {variable!r})" if variable else ""
        return TensorFormatError(f"{self.path}: {what} at byte {self.pos}{who}", path=self.path, variable=variable)

    def _read(self, n: int, variable: str | None, what: str) -> bytes:
        if n > self.remaining:
            raise self._fail(variable, f"truncated file: {what} needs {n} bytes, {self.remaining} are left")
        data = self._f.read(n)
        if len(data) != n:   # the file shrank while we read it
            raise self._fail(variable, f"truncated file: {what} needs {n} bytes, got {len(data)}")
        self.pos += n
        return data

    def check_not_foreign(self) -> None:
        """Refuse a file that starts like a pickle (or another known non-tensor format)."""
        if self.pos != 0:
            return
        head = self._f.read(8)
        self._f.seek(0)
        kind = describe_foreign(head)
        if kind == "pickle":
            raise refuse_pickle(self.path)
        if kind is not None:
            raise TensorFormatError(f"{self.path}: this file is {kind}, not a Paddle tensor file", path=self.path)

    def read_header(self, variable: str | None = None) -> tuple[str, tuple[int, ...], list[list[int]]]:
        """Read one stream's header: (dtype name, shape, LoD offsets); the data is next."""
        if self.pos == 0:
            self.check_not_foreign()
        (version,) = _U32.unpack(self._read(4, variable, "the LoDTensor version"))
        if version != TENSOR_VERSION:
            raise self._fail(variable, f"LoDTensor version {version} (only {TENSOR_VERSION} exists); "
                                       "this is not a Paddle tensor stream, or it is out of step")
        (levels,) = _U64.unpack(self._read(8, variable, "the number of LoD levels"))
        if levels * 8 > self.remaining:
            raise self._fail(variable, f"{levels} LoD levels announced, more than the {self.remaining} bytes left hold")
        lod = []
        for i in range(levels):
            (nbytes,) = _U64.unpack(self._read(8, variable, f"the size of LoD level {i}"))
            if nbytes % 8:
                raise self._fail(variable, f"LoD level {i} has {nbytes} bytes, not a whole number of 8-byte offsets")
            raw = self._read(nbytes, variable, f"LoD level {i}")
            lod.append([int(v) for v in np.frombuffer(raw, "<u8")])
        (version,) = _U32.unpack(self._read(4, variable, "the tensor version"))
        if version != TENSOR_VERSION:
            raise self._fail(variable, f"tensor version {version} (only {TENSOR_VERSION} exists)")
        (desc_size,) = _I32.unpack(self._read(4, variable, "the TensorDesc size"))
        if desc_size < 0:
            raise self._fail(variable, f"negative TensorDesc size {desc_size}")
        desc = pb.VarType.TensorDesc()
        raw = self._read(desc_size, variable, "the TensorDesc")
        try:
            desc.ParseFromString(raw)
        except Exception as exc:  # protobuf's DecodeError, or a missing required field
            raise self._fail(variable, f"malformed TensorDesc ({exc})") from None
        if not desc.HasField("data_type") or desc.data_type not in dtypes._NAME_OF_ENUM:
            raise self._fail(variable, f"TensorDesc has no tensor element type (data_type {desc.data_type})")
        shape = tuple(int(d) for d in desc.dims)
        if len(shape) > MAX_DIMS:
            raise self._fail(variable, f"TensorDesc has {len(shape)} dimensions; an array has at most {MAX_DIMS}")
        if any(d < 0 for d in shape):
            raise self._fail(variable, f"TensorDesc has a negative dimension: {list(shape)}")
        return dtypes.from_enum(desc.data_type), shape, lod

    def read_data(self, dtype: str, shape: tuple[int, ...], lod: list[list[int]],
                  variable: str | None = None) -> np.ndarray:
        """Read the elements of a tensor whose header :meth:`read_header` returned."""
        np_dtype = dtypes.to_numpy(dtype).newbyteorder("<")
        numel = 1
        for d in shape:
            numel *= d        # Python ints: a huge product cannot wrap around
        nbytes = numel * np_dtype.itemsize
        if nbytes > self.remaining:
            raise self._fail(variable, f"truncated file: a {dtype} tensor of shape {list(shape)} needs {nbytes} "
                                       f"bytes of data, {self.remaining} are left")
        # Read straight into the array (allocated uninitialized: no zero-filling pass over it).
        try:
            array = np.empty(shape, np_dtype)
        except (ValueError, MemoryError) as exc:   # e.g. [0, 2**63-1]: no data, yet no array can have it
            raise self._fail(variable, f"a {dtype} tensor of shape {list(shape)} cannot be made ({exc})") from None
        got = self._f.readinto(memoryview(array.reshape(-1).view(np.uint8))) if nbytes else 0
        if got != nbytes:                    # the file shrank while we read it
            raise self._fail(variable, f"truncated file: the tensor data needs {nbytes} bytes, got {got}")
        self.pos += nbytes
        if lod:
            problem = lod_problem(lod, shape[0] if shape else 0)
            if problem is not None:
                raise self._fail(variable, f"invalid LoD {lod}: {problem}")
        return array.astype(dtypes.to_numpy(dtype), copy=False)

    def read_tensor(self, variable: str | None = None, expect: tuple[str | None, tuple[int, ...]] | None = None
                    ) -> tuple[np.ndarray, list[list[int]]]:
        """Read one tensor: (array, LoD). ``expect`` = (dtype, shape with -1 for any) of the
        program's variable; a saved tensor that differs is a :class:`ParameterMismatchError`,
        raised before its data is read."""
        dtype, shape, lod = self.read_header(variable)
        if expect is not None:
            check_matches(self.path, variable, dtype, shape, *expect)
        return self.read_data(dtype, shape, lod, variable), lod


def check_matches(path: str, variable: str | None, dtype: str, shape: tuple[int, ...],
                  want_dtype: str | None, want_shape: tuple[int, ...] | None) -> None:
    """A saved tensor's dtype and shape against the program's variable (-1 matches any size)."""
    problems = []
    if want_dtype is not None and dtype != want_dtype:
        problems.append(f"dtype {dtype}, the program's variable is {want_dtype}")
    if want_shape is not None and (len(shape) != len(want_shape)
                                   or any(w >= 0 and w != s for w, s in zip(want_shape, shape))):
        problems.append(f"shape {list(shape)}, the program's variable is {list(want_shape)}")
    if problems:
        raise ParameterMismatchError(f"{path}: saved tensor {variable!r} has " + " and ".join(problems),
                                     path=path, variable=variable)
