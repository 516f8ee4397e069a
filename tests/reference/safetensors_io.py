"""safetensors files by hand (no safetensors/transformers package): F32, BF16 and F16.

The format: an 8-byte little-endian header length n, n bytes of JSON
{name: {"dtype", "shape", "data_offsets": [begin, end]}, optional "__metadata__": {str: str}},
then the data section the offsets index. The header is padded with spaces to a multiple of 8
so the data section is 8-byte aligned (what the safetensors library writes).

Every array handed in or returned is float32 numpy; the stored dtype is a property of the
file only. BF16 is written with round-to-nearest-even (torch's float32 -> bfloat16 cast) and
read exactly (the 16 bits are the top half of a float32). Used by gpt_torch.py (F32 files of
docs/contracts.md section 4) and hf_dir.py (Hugging Face directories in any of the three dtypes).
"""
import json
import struct

import numpy as np
import torch

DTYPES = ("F32", "BF16", "F16")
ITEM_BYTES = {"F32": 4, "BF16": 2, "F16": 2}
# The torch_dtype string of a Hugging Face config.json for each stored dtype.
TORCH_DTYPE_NAMES = {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}


def as_float32(t):
    a = t.detach().cpu().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)
    return np.ascontiguousarray(a, dtype="<f4")


def encode(a, dtype):
    """float32 array -> the bytes of dtype."""
    a = as_float32(a)
    if dtype == "F32":
        return a.tobytes()
    if dtype == "F16":
        return a.astype("<f2").tobytes()
    if dtype == "BF16":
        bits = torch.from_numpy(a.copy()).to(torch.bfloat16).view(torch.int16).numpy()
        return bits.astype("<i2").tobytes()
    raise ValueError(f"unknown safetensors dtype {dtype}; want one of {DTYPES}")


def decode(raw, dtype, shape):
    """The bytes of dtype -> float32 array of shape (exact for all three dtypes)."""
    if dtype == "F32":
        a = np.frombuffer(raw, dtype="<f4")
    elif dtype == "F16":
        a = np.frombuffer(raw, dtype="<f2").astype(np.float32)
    elif dtype == "BF16":
        a = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
    else:
        raise ValueError(f"unknown safetensors dtype {dtype}; want one of {DTYPES}")
    return a.reshape(shape).copy()


def save(path, tensors, dtype="F32", metadata=None):
    """tensors: dict name -> array, written in insertion order, all as dtype."""
    header, blobs, offset = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, t in tensors.items():
        shape = list(np.shape(t.detach() if isinstance(t, torch.Tensor) else t))
        blob = encode(t, dtype)
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    hjson = json.dumps(header, separators=(",", ":")).encode()
    hjson += b" " * ((8 - len(hjson) % 8) % 8)  # align the data section to 8 bytes
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for b in blobs:
            f.write(b)


def read_header(path):
    with open(path, "rb") as f:
        (hlen,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(hlen))


def load(path, dtypes=("F32",), want=None):
    """dict name -> float32 array of the tensors in path (only the names in `want` when
    given). A tensor stored in a dtype outside `dtypes` is an error that names it."""
    with open(path, "rb") as f:
        raw = f.read()
    (hlen,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + hlen])
    data = raw[8 + hlen:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__" or (want is not None and name not in want):
            continue
        if info["dtype"] not in dtypes:
            raise ValueError(f"{path}: tensor {name} has dtype {info['dtype']}, "
                             f"want {' or '.join(dtypes)}")
        b, e = info["data_offsets"]
        count = int(np.prod(info["shape"], dtype=np.int64))
        if e - b != count * ITEM_BYTES[info["dtype"]]:
            raise ValueError(f"{path}: tensor {name} spans {e - b} bytes, its shape needs "
                             f"{count * ITEM_BYTES[info['dtype']]}")
        out[name] = decode(data[b:e], info["dtype"], info["shape"])
    return out
