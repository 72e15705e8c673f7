"""The stored frame: how an object body is kept at rest (objects_format.md, 'Stored frame').

``frame = codec byte + payload``:

* ``0x00`` RAW: payload is the body;
* ``0x01`` ZSTD: payload is one zstd frame (content size in the header) of the body;
* ``0x02`` ZSTD_DICT: 32-byte id of a DICT object, then one zstd frame made with that dictionary;
* ``0x03`` PACKED: first 8 bytes of a PACK object's id, then offset and length (LEB128 varints): the body
  is that slice of the pack's body (resolved by crewckpt.history.objectdb, not here).

Compression never changes an object's id. Compressor objects are reused (a one-shot call with a dictionary
is ~30x slower: ../shared/notes/store-anchors.md); zstandard objects are not thread-safe, hence the lock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import zstandard

from crewckpt.errors import DecodeError
from crewckpt.format.objects import ID_BYTES, MAX_BODY

RAW, ZSTD, ZSTD_DICT, PACKED = 0, 1, 2, 3
PACK_LEVEL = 9  # repacking trades CPU for the long-range matches between versions of an object
MIN_COMPRESS = 64  # bytes: a zstd frame costs ~9 B, so tiny bodies stay raw
LEVEL = 3


class Codec:
    """Compresses bodies into frames and back; one per open store.

    Args:
        level: zstd level (3: ~570 MB/s on JSON state here).
        dictionary: optional ``(dict_id, dict_bytes)``; when set, new frames use ZSTD_DICT.
        load_dict: callback ``dict_id -> dict_bytes`` used to read frames made with another dictionary.
    """

    def __init__(self, level: int = LEVEL, dictionary: tuple[bytes, bytes] | None = None,
                 load_dict: Callable[[bytes], bytes] | None = None) -> None:
        self._lock = threading.Lock()
        self._level = level
        self._cctx = zstandard.ZstdCompressor(level=level)
        self._dctx = zstandard.ZstdDecompressor()
        self._dict_cctx: tuple[bytes, zstandard.ZstdCompressor] | None = None
        self._dict_dctx: dict[bytes, zstandard.ZstdDecompressor] = {}
        self._load_dict = load_dict
        self._level_cctx: dict[int, zstandard.ZstdCompressor] = {}
        if dictionary is not None:
            self.use_dictionary(*dictionary)

    def use_dictionary(self, dict_id: bytes, data: bytes) -> None:
        """Compress new frames with this dictionary (a DICT object's body)."""
        zd = zstandard.ZstdCompressionDict(data)
        with self._lock:
            self._dict_cctx = (dict_id, zstandard.ZstdCompressor(level=self._level, dict_data=zd))
            self._dict_dctx[dict_id] = zstandard.ZstdDecompressor(dict_data=zd)

    def encode(self, body: bytes, compress: bool = True, level: int | None = None) -> bytes:
        """body -> frame. Small or incompressible bodies stay RAW. ``level`` overrides the zstd level (and
        skips the dictionary: packs are large enough to carry their own context)."""
        if not compress or len(body) < MIN_COMPRESS:
            return b"\x00" + body
        with self._lock:
            if level is not None and level != self._level:
                cctx = self._level_cctx.get(level)
                if cctx is None:
                    cctx = self._level_cctx[level] = zstandard.ZstdCompressor(level=level)
                z = cctx.compress(body)
                return b"\x01" + z if len(z) < len(body) else b"\x00" + body
            if self._dict_cctx is not None:
                dict_id, cctx = self._dict_cctx
                z = cctx.compress(body)
                if len(z) + ID_BYTES < len(body):
                    return b"\x02" + dict_id + z
            else:
                z = self._cctx.compress(body)
                if len(z) < len(body):
                    return b"\x01" + z
        return b"\x00" + body

    def decode(self, frame: bytes, size: int | None = None) -> bytes:
        """frame -> body. Raises DecodeError on an unknown codec, a bad zstd frame, a size over 1 GiB, or
        (when ``size``, the declared body length in bytes, is given) a frame that would decode to any other
        length: nothing is decompressed beyond the declared size."""
        if not frame:
            raise DecodeError("empty frame")
        if size is not None and not 0 <= size <= MAX_BODY:
            raise DecodeError(f"declared size {size} is not between 0 and {MAX_BODY} bytes")
        codec = frame[0]
        if codec == RAW:
            if size is not None and len(frame) - 1 != size:
                raise DecodeError(f"raw frame holds {len(frame) - 1} bytes but its size says {size}")
            return bytes(frame[1:])
        if codec == ZSTD:
            return self._unzstd(self._dctx, frame[1:], size)
        if codec == ZSTD_DICT:
            dict_id, z = bytes(frame[1:1 + ID_BYTES]), frame[1 + ID_BYTES:]
            if len(dict_id) != ID_BYTES:
                raise DecodeError("truncated dictionary id in frame")
            return self._unzstd(self._dict_decompressor(dict_id), z, size)
        if codec == PACKED:
            raise DecodeError("a packed frame must be resolved through its pack")
        raise DecodeError(f"unknown codec byte {codec}")

    def _dict_decompressor(self, dict_id: bytes) -> zstandard.ZstdDecompressor:
        d = self._dict_dctx.get(dict_id)
        if d is None:
            if self._load_dict is None:
                raise DecodeError(f"frame needs dictionary {dict_id.hex()} which is not available")
            d = zstandard.ZstdDecompressor(dict_data=zstandard.ZstdCompressionDict(self._load_dict(dict_id)))
            self._dict_dctx[dict_id] = d
        return d

    def _unzstd(self, dctx: zstandard.ZstdDecompressor, z: bytes, declared: int | None = None) -> bytes:
        try:
            size = zstandard.frame_content_size(z)
        except zstandard.ZstdError:
            raise DecodeError("bad zstd frame header") from None
        if size < 0 or size > MAX_BODY:
            raise DecodeError("zstd frame without a sane content size")
        if declared is not None and size != declared:
            raise DecodeError(f"zstd frame claims {size} bytes but its size says {declared}")
        try:
            with self._lock:
                return dctx.decompress(z, max_output_size=size)
        except zstandard.ZstdError as e:
            raise DecodeError(f"bad zstd data: {e}") from None


def train_dictionary(samples: Sequence[bytes], size: int = 64 * 1024) -> bytes:
    """Train a zstd dictionary (the body of a DICT object) from sample bodies. Raises DecodeError if zstd
    cannot train on them (too few or too small samples)."""
    try:
        return zstandard.train_dictionary(size, list[bytes | bytearray | memoryview](samples)).as_bytes()
    except zstandard.ZstdError as e:
        raise DecodeError(f"cannot train a zstd dictionary: {e}") from None


PACK_KEY = 8  # bytes of the pack id kept in a packed frame


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def packed_frame(pack_id: bytes, offset: int, length: int) -> bytes:
    """Frame of an object stored inside a pack: codec 3, the first 8 bytes of the pack id, then offset and
    length as unsigned LEB128 varints (bytes). A reader resolves the prefix to PACK objects and keeps the one
    whose slice hashes to the member's id, so a prefix collision can cost a retry, never wrong data."""
    return b"\x03" + pack_id[:PACK_KEY] + _uvarint(offset) + _uvarint(length)


def parse_packed(frame: bytes) -> tuple[bytes, int, int]:
    """``(pack id prefix, offset, length)`` of a PACKED frame. Raises DecodeError when malformed."""
    if len(frame) < 1 + PACK_KEY + 2 or frame[0] != PACKED:
        raise DecodeError("malformed packed frame")
    vals = []
    pos = 1 + PACK_KEY
    for _ in range(2):
        n = shift = 0
        while True:
            if pos >= len(frame) or shift > 35:
                raise DecodeError("malformed packed frame varint")
            b = frame[pos]
            pos += 1
            n |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
        vals.append(n)
    if pos != len(frame):
        raise DecodeError("trailing bytes in packed frame")
    return bytes(frame[1:1 + PACK_KEY]), vals[0], vals[1]
