#!/usr/bin/env python3
"""Pure-Python (numpy-only) reader/writer for the safetensors format.

Used by reference scripts to exchange tensors with the C++ side
(src/qkv/io/safetensors.h) without depending on the `safetensors` package.

Layout: 8-byte little-endian header length N, N bytes of UTF-8 JSON
({name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}}),
then the data buffer (row-major, little-endian). Like the C++ writer, `save`
lays tensors out sorted by name, contiguously, and pads the header with spaces
so the data buffer starts at an 8-byte-aligned file offset.

API:
    save(path, tensors, metadata=None)   tensors: {name: numpy array | torch tensor}
    load(path) -> {name: numpy array}     in file (data offset) order
    load_with_metadata(path) -> (tensors, metadata)

Note the C++ reader accepts only F32, I32, I64 and F64; this module also
handles the other numpy-representable dtypes (BOOL, U8, I8, I16, U16, F16, U32, U64).

Command line:
    safetensors_io.py --selftest-write PATH   write the fixture file the C++ test checks
    safetensors_io.py --selftest              round-trip and error checks of this module
    safetensors_io.py --dump PATH             print a file's tensors and metadata
"""

import json
import os
import struct
import sys
import tempfile

import numpy as np

MAX_HEADER_BYTES = 100_000_000  # same limit as the reference implementation
METADATA_KEY = "__metadata__"

# On-disk dtype name -> little-endian numpy dtype.
_DTYPES = {
    "BOOL": np.dtype("?"),
    "U8": np.dtype("u1"),
    "I8": np.dtype("i1"),
    "I16": np.dtype("<i2"),
    "U16": np.dtype("<u2"),
    "F16": np.dtype("<f2"),
    "I32": np.dtype("<i4"),
    "U32": np.dtype("<u4"),
    "F32": np.dtype("<f4"),
    "I64": np.dtype("<i8"),
    "U64": np.dtype("<u8"),
    "F64": np.dtype("<f8"),
}
# (numpy kind, itemsize) -> on-disk name; independent of the array's byte order.
_NAME_BY_KIND = {(dt.kind, dt.itemsize): name for name, dt in _DTYPES.items()}


class SafetensorsError(ValueError):
    """Malformed file or unsupported input; the message names the file."""


def _fail(path, what):
    raise SafetensorsError(f"safetensors file '{path}': {what}")


# ------------------------------------------------------------------ writing --

def _to_numpy(value):
    # torch tensors (possibly on GPU / requiring grad) -> numpy, without importing torch.
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    return np.asarray(value)


def _encode_tensor(path, name, value):
    """Returns (dtype name, shape, little-endian row-major bytes)."""
    array = _to_numpy(value)
    dtype_name = _NAME_BY_KIND.get((array.dtype.kind, array.dtype.itemsize))
    if dtype_name is None:
        _fail(path, f"tensor '{name}' has unsupported numpy dtype {array.dtype}")
    little_endian = np.ascontiguousarray(array, dtype=_DTYPES[dtype_name])
    return dtype_name, list(array.shape), little_endian.tobytes()


def _check_metadata(path, metadata):
    for key, value in metadata.items():
        if not isinstance(key, str) or not isinstance(value, str):
            _fail(path, f"metadata must map str to str, got {key!r}: {value!r}")


def _build_header(header):
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    # Pad so that 8 (length prefix) + header length is a multiple of 8.
    return text + b" " * (-(8 + len(text)) % 8)


def _write_atomically(path, chunks):
    tmp_path = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp_path, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp_path, path)
    except BaseException:
        if os.path.exists(tmp_path):
            os.unlink(tmp_path)
        raise


def save(path, tensors, metadata=None):
    """Writes {name: array or torch tensor} to path, sorted by name, data 8-byte aligned."""
    path = os.fspath(path)
    header = {}
    if metadata:
        _check_metadata(path, metadata)
        header[METADATA_KEY] = dict(metadata)
    data_chunks = []
    offset = 0
    for name in sorted(tensors):
        if not isinstance(name, str) or name == METADATA_KEY:
            _fail(path, f"invalid tensor name {name!r}")
        dtype_name, shape, data = _encode_tensor(path, name, tensors[name])
        header[name] = {"dtype": dtype_name, "shape": shape,
                        "data_offsets": [offset, offset + len(data)]}
        data_chunks.append(data)
        offset += len(data)
    header_bytes = _build_header(header)
    _write_atomically(path, [struct.pack("<Q", len(header_bytes)), header_bytes] + data_chunks)


# ------------------------------------------------------------------ reading --

def _reject_duplicate_keys(pairs):
    seen = {}
    for key, value in pairs:
        if key in seen:
            raise SafetensorsError(f"duplicate key '{key}'")
        seen[key] = value
    return seen


def _parse_header(path, raw):
    if len(raw) < 8:
        _fail(path, f"file is {len(raw)} bytes, shorter than the 8-byte header-length prefix")
    (header_len,) = struct.unpack_from("<Q", raw, 0)
    if header_len > MAX_HEADER_BYTES:
        _fail(path, f"header length {header_len} exceeds the {MAX_HEADER_BYTES}-byte limit")
    if header_len > len(raw) - 8:
        _fail(path, f"header length {header_len} is larger than the {len(raw) - 8} bytes "
                    f"that follow the prefix (truncated?)")
    try:
        header = json.loads(raw[8:8 + header_len].decode("utf-8"),
                            object_pairs_hook=_reject_duplicate_keys)
    except (UnicodeDecodeError, json.JSONDecodeError, SafetensorsError) as e:
        _fail(path, f"header is not valid JSON: {e}")
    if not isinstance(header, dict):
        _fail(path, f"header is a JSON {type(header).__name__}, expected an object")
    return header, 8 + header_len


def _is_count(value):
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _parse_entry(path, name, entry, data_size):
    """Validates one header entry; returns (numpy dtype, shape, begin, end)."""
    if not isinstance(entry, dict):
        _fail(path, f"tensor '{name}' entry is not an object")
    for field in ("dtype", "shape", "data_offsets"):
        if field not in entry:
            _fail(path, f"tensor '{name}' is missing \"{field}\"")
    dtype = _DTYPES.get(entry["dtype"]) if isinstance(entry["dtype"], str) else None
    if dtype is None:
        _fail(path, f"tensor '{name}' has unknown dtype {entry['dtype']!r}")
    shape = entry["shape"]
    if not isinstance(shape, list) or not all(_is_count(d) for d in shape):
        _fail(path, f"tensor '{name}' has invalid shape {shape!r} (negative dim or non-integer)")
    offsets = entry["data_offsets"]
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(map(_is_count, offsets))):
        _fail(path, f"tensor '{name}' has invalid data_offsets {offsets!r}")
    begin, end = offsets
    if end < begin:
        _fail(path, f"tensor '{name}' data_offsets {offsets} have end < begin")
    if end > data_size:
        _fail(path, f"tensor '{name}' data_offsets [{begin},{end}) exceed data size "
                    f"{data_size} (file truncated?)")
    expected = int(np.prod(shape, dtype=object)) * dtype.itemsize
    if end - begin != expected:
        _fail(path, f"tensor '{name}' needs {expected} bytes but data_offsets "
                    f"[{begin},{end}) span {end - begin}")
    return dtype, tuple(shape), begin, end


def _check_no_overlap(path, entries):
    """entries: [(name, dtype, shape, begin, end)] sorted by (begin, end)."""
    furthest = None
    for name, _, _, begin, end in entries:
        if begin == end:
            continue
        if furthest is not None and begin < furthest[2]:
            _fail(path, f"tensor '{name}' data_offsets [{begin},{end}) overlap tensor "
                        f"'{furthest[0]}' data_offsets [{furthest[1]},{furthest[2]})")
        if furthest is None or end > furthest[2]:
            furthest = (name, begin, end)


def load_with_metadata(path):
    """Returns ({name: numpy array in native byte order}, {metadata key: value})."""
    path = os.fspath(path)
    with open(path, "rb") as f:
        raw = f.read()
    header, data_start = _parse_header(path, raw)
    metadata = header.pop(METADATA_KEY, {})
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        _fail(path, "\"__metadata__\" must be an object of strings")
    data_size = len(raw) - data_start
    entries = [(name,) + _parse_entry(path, name, entry, data_size)
               for name, entry in header.items()]
    entries.sort(key=lambda e: (e[3], e[4]))
    _check_no_overlap(path, entries)
    tensors = {}
    for name, dtype, shape, begin, _ in entries:
        count = int(np.prod(shape, dtype=np.int64))
        flat = np.frombuffer(raw, dtype=dtype, count=count, offset=data_start + begin)
        tensors[name] = flat.astype(dtype.newbyteorder("="), copy=True).reshape(shape)
    return tensors, dict(metadata)


def load(path):
    """Returns {name: numpy array} in file order."""
    return load_with_metadata(path)[0]


# ------------------------------------------------------------ command line --

def selftest_tensors():
    """The fixture contents; tests/io/safetensors_test.cpp checks them value by value."""
    return {
        "a": np.arange(6, dtype=np.float32).reshape(2, 3),
        "b": np.array([7, -1, 3], dtype=np.int32),
        "c": np.array(2.5, dtype=np.float64),            # 0-dim scalar
        "d": np.array([1 << 40, -5], dtype=np.int64),
        "e": np.zeros((0, 4), dtype=np.float32),          # empty tensor
    }


SELFTEST_METADATA = {"format": "pt"}


def _expect_error(path, fragment):
    try:
        load(path)
    except SafetensorsError as e:
        assert fragment in str(e) and path in str(e), str(e)
        return
    raise AssertionError(f"expected SafetensorsError containing {fragment!r}")


def _run_selftest():
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "t.safetensors")
        expected = selftest_tensors()
        save(path, dict(reversed(list(expected.items()))), metadata=SELFTEST_METADATA)
        tensors, metadata = load_with_metadata(path)
        assert metadata == SELFTEST_METADATA, metadata
        assert list(tensors) == sorted(expected), list(tensors)
        for name, want in expected.items():
            assert tensors[name].dtype == want.dtype and tensors[name].shape == want.shape, name
            assert np.array_equal(tensors[name], want), name
        with open(path, "rb") as f:
            raw = f.read()
        assert (8 + struct.unpack_from("<Q", raw)[0]) % 8 == 0, "data start not aligned"
        assert not any(n.startswith("t.safetensors.tmp") for n in os.listdir(tmp))

        with open(path, "wb") as f:
            f.write(raw[:-4])
        _expect_error(path, "exceed data size")
        with open(path, "wb") as f:
            f.write(raw[:5])
        _expect_error(path, "shorter than the 8-byte")
    print("safetensors_io selftest OK")


def _dump(path):
    tensors, metadata = load_with_metadata(path)
    print(f"metadata: {metadata}")
    for name, array in tensors.items():
        print(f"{name}: {array.dtype} {list(array.shape)} {array.ravel()[:8].tolist()}")


def main(argv):
    if len(argv) == 3 and argv[1] == "--selftest-write":
        # The build's fixture directory may not exist yet on a fresh build tree.
        os.makedirs(os.path.dirname(os.path.abspath(argv[2])), exist_ok=True)
        save(argv[2], selftest_tensors(), metadata=SELFTEST_METADATA)
        return 0
    if len(argv) == 2 and argv[1] == "--selftest":
        _run_selftest()
        return 0
    if len(argv) == 3 and argv[1] == "--dump":
        _dump(argv[2])
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
