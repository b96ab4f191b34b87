"""A reader of CTranslate2 model directories: model.bin, config.json and the vocabularies.

Written from the layout CTranslate2 itself writes (python/ctranslate2/specs/model_spec.py,
`ModelSpec._serialize`) and reads (src/models/model.cc), little-endian throughout:

    uint32 binary_version                       (1 .. 6)
    [version >= 2] string spec_name, uint32 spec_revision
    uint32 n_variables, then per variable:
        string name; uint8 rank; uint32 dims[rank]
        [version >= 4] uint8 dtype id; uint32 n_bytes
        [version <  4] uint8 item size (4 float32, 2 int16, 1 int8); uint32 n_items
        the raw data (row-major)
    [version >= 3] uint32 n_aliases, then per alias: string alias, string variable name
    string = uint16 length (the terminating NUL included), the bytes, NUL

dtype ids: 0 float32, 1 int8, 2 int16, 3 int32, 4 float16, 5 bfloat16. Quantized weights
(int8, int16) carry a float32 `<name>_scale`; CTranslate2 dequantizes them as q / scale (per
output row for int8, one scale for int16), and so does `dequantized`. Scalars (flags, enums,
head counts) are variables too, so the model's options are read from the file itself.

Torch-free (numpy only): the importer maps the result onto our model afterwards.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

MODEL_FILE = "model.bin"
CONFIG_FILE = "config.json"
MAX_BINARY_VERSION = 6
DTYPES = {0: "float32", 1: "int8", 2: "int16", 3: "int32", 4: "float16", 5: "bfloat16"}
ITEM_SIZE_DTYPES = {4: "float32", 2: "int16", 1: "int8"}  # binary versions 1 to 3
FLOATS = ("float32", "float16", "bfloat16")
QUANTIZED = ("int8", "int16")
VOCABULARY_FILES = {
    "shared": ("shared_vocabulary.json", "shared_vocabulary.txt"),
    "source": ("source_vocabulary.json", "source_vocabulary.txt"),
    "target": ("target_vocabulary.json", "target_vocabulary.txt"),
}


class CT2FormatError(ValueError):
    """A CTranslate2 model directory that cannot be read; the message names the file or the
    variable and what is wrong."""


@dataclass
class CT2Model:
    """The contents of model.bin and config.json, variables as stored (not dequantized)."""

    path: Path
    binary_version: int
    spec: str
    revision: int
    variables: dict[str, np.ndarray]
    aliases: dict[str, str] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    dtypes: dict[str, str] = field(default_factory=dict)  # as stored: int8, bfloat16, ...

    def resolve(self, name: str) -> str:
        """The stored variable's name for a name or an alias of it."""
        seen = set()
        while name in self.aliases and name not in self.variables:
            if name in seen:
                raise CT2FormatError(f"{self.path / MODEL_FILE}: alias loop at {name!r}")
            seen.add(name)
            name = self.aliases[name]
        return name

    def has(self, name: str) -> bool:
        return self.resolve(name) in self.variables

    def raw(self, name: str) -> np.ndarray:
        stored = self.resolve(name)
        if stored not in self.variables:
            raise CT2FormatError(f"{self.path / MODEL_FILE}: no variable {name!r}")
        return self.variables[stored]

    def scalar(self, name: str, default: Any = None) -> Any:
        """A scalar variable (a flag, an enum, a count) as a Python number; default if absent."""
        if not self.has(name):
            return default
        value = self.raw(name)
        if value.size != 1:
            raise CT2FormatError(f"{self.path / MODEL_FILE}: {name} is not a scalar "
                                 f"(shape {value.shape})")
        return value.reshape(()).item()

    def dequantized(self, name: str) -> np.ndarray:
        """The variable in float32: floats converted, int8/int16 divided by their scales."""
        stored = self.resolve(name)
        value = self.raw(name)
        dtype = self.dtypes[stored]
        if dtype in FLOATS:
            return value.astype(np.float32)
        if dtype in QUANTIZED:  # the scale beside the stored variable, or beside the alias
            scale_name = next((n for n in (f"{stored}_scale", f"{name}_scale") if self.has(n)),
                              f"{name}_scale")
            if not self.has(scale_name):
                raise CT2FormatError(f"{self.path / MODEL_FILE}: {dtype} variable {name} has no "
                                     f"{scale_name}")
            scale = self.dequantized(scale_name).astype(np.float32)
            if dtype == "int8" and scale.size > 1:  # one scale per output row
                scale = scale.reshape((-1,) + (1,) * (value.ndim - 1))  # (rows, 1)
            return value.astype(np.float32) / scale
        raise CT2FormatError(
            f"{self.path / MODEL_FILE}: variable {name} has dtype {dtype}, which cannot be "
            "read as weights (float32, float16, bfloat16, int8 and int16 can)"
        )


def _read(f: BinaryIO, fmt: str, where: Path) -> tuple:
    size = struct.calcsize(fmt)
    data = f.read(size)
    if len(data) != size:
        raise CT2FormatError(f"{where}: truncated (expected {size} more bytes)")
    return struct.unpack(fmt, data)


def _read_string(f: BinaryIO, where: Path) -> str:
    (length,) = _read(f, "<H", where)
    data = f.read(length)
    if len(data) != length or not data.endswith(b"\0"):
        raise CT2FormatError(f"{where}: truncated or unterminated string")
    return data[:-1].decode("utf-8")


def _array(data: bytes, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    if dtype == "bfloat16":  # the upper half of a float32
        halves = np.frombuffer(data, dtype="<u2").astype(np.uint32) << 16
        return halves.view(np.float32).reshape(shape)
    return np.frombuffer(data, dtype=np.dtype(dtype).newbyteorder("<")).reshape(shape)


def read_model_bin(path: str | Path) -> CT2Model:
    """Parse model.bin; every variable of a known dtype is returned as stored."""
    path = Path(path)
    with open(path, "rb") as f:
        (version,) = _read(f, "<I", path)
        if not 1 <= version <= MAX_BINARY_VERSION:
            raise CT2FormatError(f"{path}: binary version {version} is not one this reader "
                                 f"knows (1 to {MAX_BINARY_VERSION})")
        spec, revision = "", 1
        if version >= 2:
            spec = _read_string(f, path)
            (revision,) = _read(f, "<I", path)
        (count,) = _read(f, "<I", path)
        variables: dict[str, np.ndarray] = {}
        dtypes: dict[str, str] = {}
        for _ in range(count):
            name = _read_string(f, path)
            (rank,) = _read(f, "<B", path)
            shape = _read(f, f"<{rank}I", path) if rank else ()
            if version >= 4:
                type_id, n_bytes = _read(f, "<BI", path)
                if type_id not in DTYPES:
                    raise CT2FormatError(f"{path}: variable {name} has an unknown dtype id "
                                         f"{type_id}")
                dtype = DTYPES[type_id]
            else:
                item_size, n_items = _read(f, "<BI", path)
                if item_size not in ITEM_SIZE_DTYPES:
                    raise CT2FormatError(f"{path}: variable {name} has items of {item_size} "
                                         "bytes, a width no dtype has")
                dtype, n_bytes = ITEM_SIZE_DTYPES[item_size], n_items * item_size
            data = f.read(n_bytes)
            if len(data) != n_bytes:
                raise CT2FormatError(f"{path}: variable {name} is truncated")
            expected = int(np.prod(shape, dtype=np.int64)) * (2 if dtype == "bfloat16"
                                                              else np.dtype(dtype).itemsize)
            if expected != n_bytes:
                raise CT2FormatError(f"{path}: variable {name} holds {n_bytes} bytes, its "
                                     f"shape {list(shape)} and dtype {dtype} need {expected}")
            variables[name] = _array(data, dtype, tuple(shape))
            dtypes[name] = dtype
        aliases: dict[str, str] = {}
        if version >= 3:
            (n_aliases,) = _read(f, "<I", path)
            for _ in range(n_aliases):
                alias = _read_string(f, path)
                aliases[alias] = _read_string(f, path)
    return CT2Model(path.parent, version, spec, revision, variables, aliases, dtypes=dtypes)


def _read_vocabulary(path: Path) -> list[str]:
    if path.suffix == ".json":
        tokens = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
            raise CT2FormatError(f"{path}: must be a JSON list of token strings")
        return tokens
    # one token per line; CTranslate2 reads a line holding only a newline as an empty token
    return path.read_text(encoding="utf-8").split("\n")[:-1]


def read_vocabularies(model_dir: str | Path) -> tuple[list[str], list[str], bool]:
    """(source tokens, target tokens, shared) in CTranslate2's order (its ids)."""
    root = Path(model_dir)

    def find(kind: str) -> Path | None:
        return next((root / n for n in VOCABULARY_FILES[kind] if (root / n).is_file()), None)

    shared = find("shared")
    if shared is not None:
        tokens = _read_vocabulary(shared)
        return tokens, tokens, True
    source, target = find("source"), find("target")
    if source is None or target is None:
        raise CT2FormatError(f"{root}: no vocabulary (shared_vocabulary.json/.txt, or "
                             "source_vocabulary and target_vocabulary)")
    return _read_vocabulary(source), _read_vocabulary(target), False


def read_model_dir(model_dir: str | Path) -> CT2Model:
    """model.bin and config.json of a CTranslate2 model directory."""
    root = Path(model_dir)
    if not (root / MODEL_FILE).is_file():
        raise CT2FormatError(f"{root}: no {MODEL_FILE}; not a CTranslate2 model directory")
    model = read_model_bin(root / MODEL_FILE)
    config_path = root / CONFIG_FILE
    if config_path.is_file():
        try:
            model.config = json.loads(config_path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CT2FormatError(f"{config_path}: not valid JSON ({exc})") from None
    return model
