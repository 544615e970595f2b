"""A small, self-contained GGUF reader (format versions 2 and 3, little-endian).

Reads the header, the metadata key/value pairs (arrays included), the tensor
infos and the data blob offset, and hands out each tensor's raw bytes. It does
not interpret the tensor types; see dequant.py for that.
"""
import mmap
import struct

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32

# Metadata value types: id -> (name, struct format or None for the variable-size ones).
VALUE_TYPES = {
    0: ("UINT8", "<B"),
    1: ("INT8", "<b"),
    2: ("UINT16", "<H"),
    3: ("INT16", "<h"),
    4: ("UINT32", "<I"),
    5: ("INT32", "<i"),
    6: ("FLOAT32", "<f"),
    7: ("BOOL", "<b"),
    8: ("STRING", None),
    9: ("ARRAY", None),
    10: ("UINT64", "<Q"),
    11: ("INT64", "<q"),
    12: ("FLOAT64", "<d"),
}

# ggml tensor types: id -> (name, elements per block, bytes per block). Only the
# ones a reader may meet in a model file are listed; the forward pass supports a
# subset of them (dequant.py).
TENSOR_TYPES = {
    0: ("F32", 1, 4),
    1: ("F16", 1, 2),
    2: ("Q4_0", 32, 18),
    3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24),
    8: ("Q8_0", 32, 34),
    9: ("Q8_1", 32, 36),
    10: ("Q2_K", 256, 84),
    11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176),
    14: ("Q6_K", 256, 210),
    15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66),
    17: ("IQ2_XS", 256, 74),
    18: ("IQ3_XXS", 256, 98),
    19: ("IQ1_S", 256, 50),
    20: ("IQ4_NL", 32, 18),
    21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82),
    23: ("IQ4_XS", 256, 136),
    24: ("I8", 1, 1),
    25: ("I16", 1, 2),
    26: ("I32", 1, 4),
    27: ("I64", 1, 8),
    28: ("F64", 1, 8),
    29: ("IQ1_M", 256, 56),
    30: ("BF16", 1, 2),
    34: ("TQ1_0", 256, 54),
    35: ("TQ2_0", 256, 66),
    39: ("MXFP4", 32, 17),
}


class GGUFError(Exception):
    pass


class TensorInfo:
    def __init__(self, name, ne, type_id, offset):
        self.name = name
        self.ne = ne  # ggml order: ne[0] is the contiguous dimension
        self.type_id = type_id
        self.offset = offset  # relative to the data blob
        self.data_offset = None  # absolute, set once the blob start is known

    @property
    def type_name(self):
        return TENSOR_TYPES.get(self.type_id, (f"type {self.type_id}",))[0]

    @property
    def n_elements(self):
        n = 1
        for d in self.ne:
            n *= d
        return n

    @property
    def n_bytes(self):
        if self.type_id not in TENSOR_TYPES:
            raise GGUFError(f"tensor {self.name}: unknown ggml type id {self.type_id}")
        _, block_elems, block_bytes = TENSOR_TYPES[self.type_id]
        if self.ne and self.ne[0] % block_elems:
            raise GGUFError(f"tensor {self.name}: ne[0]={self.ne[0]} is not a multiple of the "
                            f"{self.type_name} block size {block_elems}")
        rows = self.n_elements // self.ne[0] if self.ne else 1
        return (self.ne[0] // block_elems) * block_bytes * rows if self.ne else block_bytes


class _Cursor:
    def __init__(self, buf, path):
        self.buf = buf
        self.pos = 0
        self.path = path

    def take(self, n):
        if self.pos + n > len(self.buf):
            raise GGUFError(f"{self.path}: truncated at byte {self.pos} (wanted {n} more bytes)")
        out = self.buf[self.pos:self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt):
        size = struct.calcsize(fmt)
        return struct.unpack(fmt, self.take(size))[0]

    def string(self):
        n = self.unpack("<Q")
        if n > (1 << 30):
            raise GGUFError(f"{self.path}: string length {n} at byte {self.pos - 8} is implausible")
        return bytes(self.take(n)).decode("utf-8")

    def value(self, type_id, key):
        if type_id not in VALUE_TYPES:
            raise GGUFError(f"{self.path}: key {key!r} has unknown value type {type_id}")
        name, fmt = VALUE_TYPES[type_id]
        if name == "STRING":
            return self.string()
        if name == "ARRAY":
            elem_type = self.unpack("<I")
            count = self.unpack("<Q")
            if elem_type == 9:
                raise GGUFError(f"{self.path}: key {key!r} is an array of arrays")
            return [self.value(elem_type, key) for _ in range(count)]
        v = self.unpack(fmt)
        return bool(v) if name == "BOOL" else v


class GGUFFile:
    """Parses `path`; `.metadata` is a dict of key -> value, `.tensors` a dict of
    name -> TensorInfo (in file order), `.tensor_bytes(name)` the raw bytes."""

    def __init__(self, path):
        self.path = str(path)
        with open(self.path, "rb") as f:
            try:
                self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            except ValueError as e:  # empty file
                raise GGUFError(f"{self.path}: cannot map the file ({e})")
        cur = _Cursor(memoryview(self._map), self.path)
        magic = bytes(cur.take(4))
        if magic != GGUF_MAGIC:
            raise GGUFError(f"{self.path}: not a GGUF file (magic {magic!r})")
        self.version = cur.unpack("<I")
        if self.version not in (2, 3):
            hint = " (big-endian file?)" if self.version & 0xFFFF == 0 else ""
            raise GGUFError(f"{self.path}: unsupported GGUF version {self.version}{hint}")
        n_tensors = cur.unpack("<Q")
        n_kv = cur.unpack("<Q")

        self.metadata = {}
        for _ in range(n_kv):
            key = cur.string()
            type_id = cur.unpack("<I")
            if key in self.metadata:
                raise GGUFError(f"{self.path}: duplicate key {key!r}")
            self.metadata[key] = cur.value(type_id, key)

        self.tensors = {}
        for _ in range(n_tensors):
            name = cur.string()
            n_dims = cur.unpack("<I")
            if n_dims > 4:
                raise GGUFError(f"{self.path}: tensor {name} has {n_dims} dims (at most 4)")
            ne = [cur.unpack("<Q") for _ in range(n_dims)]
            type_id = cur.unpack("<I")
            offset = cur.unpack("<Q")
            if name in self.tensors:
                raise GGUFError(f"{self.path}: duplicate tensor {name}")
            self.tensors[name] = TensorInfo(name, ne, type_id, offset)

        self.alignment = int(self.metadata.get("general.alignment", DEFAULT_ALIGNMENT))
        if self.alignment <= 0 or self.alignment & (self.alignment - 1):
            raise GGUFError(f"{self.path}: general.alignment {self.alignment} is not a power of two")
        self.data_start = cur.pos + (self.alignment - cur.pos % self.alignment) % self.alignment
        for t in self.tensors.values():
            if t.offset % self.alignment:
                raise GGUFError(f"{self.path}: tensor {t.name} offset {t.offset} is not aligned")
            t.data_offset = self.data_start + t.offset
            if t.data_offset + t.n_bytes > len(self._map):
                raise GGUFError(f"{self.path}: tensor {t.name} runs past the end of the file")

    def tensor_bytes(self, name):
        t = self.tensors[name]
        return memoryview(self._map)[t.data_offset:t.data_offset + t.n_bytes]

    def get(self, key, default=None):
        return self.metadata.get(key, default)
