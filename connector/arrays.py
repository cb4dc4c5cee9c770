"""Arrow arrays built from their buffers, never with `pa.array`.

`pa.array` of Python objects or a numpy array makes pyarrow import pandas (~40 MB and a
quarter of a second), which an export, a sync or a load never needs otherwise. Every path
that turns Python values into Arrow arrays goes through these builders.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Sequence
from datetime import datetime
from itertools import repeat
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from connector.stamps import micros_of, stamp_of

__all__ = [
    "arrow_ints",
    "arrow_mask",
    "bool_array",
    "concat_ids",
    "float_array",
    "from_buffers",
    "int64_values",
    "newer",
    "no_ids",
    "stamp_scalar",
    "string_array",
    "text_scalar",
]


def string_array(values: Sequence[Any], *, blank_is_null: bool = False) -> pa.Array:
    """Strings and Nones as a string array; TypeError for
    any other value. With `blank_is_null`, empty strings are nulls too."""
    valid = _not_none(values)
    texts = values if valid is None else ["" if v is None else v for v in values]
    joined = "".join(texts)
    if joined.isascii():  # then a string's length is its UTF-8 length: no encoding one by one
        data, sizes = joined.encode("ascii"), map(len, texts)
    else:
        encoded = [t.encode() for t in texts]
        data, sizes = b"".join(encoded), map(len, encoded)
    lengths = np.fromiter(sizes, np.int64, len(values))
    if blank_is_null:
        valid = lengths > 0 if valid is not None or not lengths.all() else None
    offsets = np.zeros(len(values) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] >= 2**31:
        raise OverflowError("more than 2 GiB of text in one batch")
    buffers = [pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)]
    return from_buffers(pa.string(), valid, len(values), buffers)


def float_array(values: list[Any]) -> pa.Array:
    """JSON numbers and Nones as a float64 array; TypeError for any other value."""
    if not set(map(type, values)) <= {float, int, type(None)}:
        raise TypeError("not all numbers")
    numbers = np.array(values, np.float64)  # None becomes NaN, which JSON cannot send
    nan = np.isnan(numbers)
    valid = ~nan if nan.any() else None
    return from_buffers(pa.float64(), valid, len(values), [pa.py_buffer(numbers)])


def bool_array(values: list[Any]) -> pa.Array:
    """JSON booleans and Nones as a boolean array; TypeError for any other value."""
    if not set(map(type, values)) <= {bool, type(None)}:
        raise TypeError("not all booleans")
    numbers = np.array(values, np.float64)  # True 1, False 0, None NaN
    nan = np.isnan(numbers)
    valid = ~nan if nan.any() else None
    bits = np.packbits(numbers == 1.0, bitorder="little")
    return from_buffers(pa.bool_(), valid, len(values), [pa.py_buffer(bits)])


def _not_none(values: Sequence[Any]) -> np.ndarray[Any, np.dtype[np.bool_]] | None:
    """Which values are not None, or None when all of them are not."""
    if None not in values:
        return None
    return np.fromiter(map(operator.is_not, values, repeat(None)), np.bool_, len(values))


def from_buffers(
    type_: pa.DataType,
    valid: np.ndarray[Any, np.dtype[np.bool_]] | None,
    length: int,
    buffers: list[pa.Buffer],
) -> pa.Array:
    """An array of `length` values from its data buffers and, when some are null, `valid`."""
    if valid is None:
        return pa.Array.from_buffers(type_, length, [None, *buffers], null_count=0)
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little"))
    nulls = length - int(np.count_nonzero(valid))
    return pa.Array.from_buffers(type_, length, [bitmap, *buffers], null_count=nulls)


def arrow_mask(mask: npt.NDArray[np.bool_]) -> pa.Array:
    """A numpy boolean array as an Arrow one, from its bits."""
    bits = np.packbits(np.ascontiguousarray(mask, np.bool_), bitorder="little")
    return pa.Array.from_buffers(pa.bool_(), len(mask), [None, pa.py_buffer(bits)])


def text_scalar(text: str) -> pa.Scalar:
    """`text` as an Arrow string scalar. `pa.scalar` of any Python value makes pyarrow
    import pandas (0.3 s of CPU; a Delta merge paid it for its op column)."""
    return string_array([text])[0]


def stamp_scalar(value: datetime, type: pa.TimestampType) -> pa.Scalar:
    """`value` as a scalar of `type`, a timestamp in microseconds, without `pa.scalar`
    (see `text_scalar`)."""
    data = np.array([micros_of(value)], np.int64)
    return pa.Array.from_buffers(type, 1, [None, pa.py_buffer(data)])[0]


def arrow_ints(values: npt.NDArray[np.int64]) -> pa.Array:
    """A numpy int64 array as an Arrow one."""
    data = np.ascontiguousarray(values, np.int64)
    return pa.Array.from_buffers(pa.int64(), len(data), [None, pa.py_buffer(data)])


def int64_values(array: pa.Array | pa.ChunkedArray, missing: int) -> npt.NDArray[np.int64]:
    """`array` (integers, or timestamps as theirs) as numpy int64, a null as `missing`. Read
    from its buffers: pyarrow's `to_numpy`, like a Python scalar handed to a compute function,
    makes pyarrow import pandas, which a quiet sync never needs."""
    chunks = array.chunks if isinstance(array, pa.ChunkedArray) else [array]
    parts = [_int64_chunk(chunk.cast(pa.int64()), missing) for chunk in chunks if len(chunk)]
    return np.concatenate(parts) if parts else np.empty(0, np.int64)


def _int64_chunk(values: pa.Array, missing: int) -> npt.NDArray[np.int64]:
    validity, data = values.buffers()
    out = np.frombuffer(data, np.int64, len(values), values.offset * 8).copy()
    if values.null_count:
        bits = np.unpackbits(np.frombuffer(validity, np.uint8), bitorder="little")
        out[bits[values.offset : values.offset + len(values)] == 0] = missing
    return out


def no_ids() -> pa.Array:
    """An empty id array."""
    return string_array([])


def concat_ids(arrays: Iterable[pa.Array]) -> pa.Array:
    """The ids of `arrays` as one array (an empty one when there are none)."""
    chunks = [a for a in arrays if len(a)]
    return pa.concat_arrays(chunks) if chunks else no_ids()


def newer(cursor: str | None, stamps: pa.Array | pa.ChunkedArray) -> str | None:
    """The later of `cursor` and the newest of `stamps` (UTC microseconds). Read as integers:
    a time-zone-aware timestamp scalar's `as_py` would make pyarrow import pandas."""
    micros = pc.max(stamps.cast(pa.int64())).as_py() if len(stamps) else None
    if micros is None:
        return cursor
    stamp = stamp_of(micros)
    return max(cursor or stamp, stamp)
