"""Checkpoint files, offload images and region metadata of
:mod:`ringkv.ray`: snapshot headers (docs/snapshot-format.md) whose
``__metadata__`` names the request (``request_id``, or ``request_id_hex``),
the frame (``last_committed``) and the session's incarnation
(:data:`INCARNATION_KEY`, which :func:`tag_image` adds), so that the bytes
alone say whose they are (:func:`whose`; docs/migration.md, "Faults").
"""
from __future__ import annotations

import json
import os
import tempfile
from typing import Any

import xxhash

from ..errors import RingKVOSError, RingKVRuntimeError, RingKVValueError
from ..model import SnapshotInfo, inspect_snapshot

__all__ = ["INCARNATION_KEY", "TEMP_PREFIX", "IncarnationError", "tag_image", "read_checkpoint",
           "write_atomic", "header_metadata", "header_request_id", "incarnation_of",
           "whose"]


class IncarnationError(RingKVRuntimeError):
    """Bytes (an offload image or file, region metadata) refused by their
    receiver because their snapshot header names another incarnation of the
    request than the one the receiver holds it as, or none (written by the
    library alone, or before incarnations): nothing changed."""

#: The metadata key holding a checkpoint's incarnation (a printable ASCII
#: token, :func:`ringkv.ray.host.new_incarnation`).
INCARNATION_KEY = "ringkv_ray_incarnation"
#: Prefix of the temporary file :func:`write_atomic` writes beside its target.
TEMP_PREFIX = ".ringkv-ray.tmp-"

_ZEROS = b"0" * 16
_FIELD = b'"header_xxh3":"'
#: The key region metadata (``Model.export_meta``) has and a file's header lacks.
_META_VERSION_KEY = "session_meta_version"


def tag_image(image: Any, tags: dict[str, str]) -> bytes:
    """A snapshot image (bytes-like, as ``Model.save_session_bytes`` returns)
    with ``tags`` (str -> printable ASCII str) added to its ``__metadata__``
    and its ``header_xxh3`` recomputed; the header is re-serialised compactly
    and padded with spaces to a multiple of 8 bytes (as the C writer pads a
    file's header), the data section kept as it is. RingKVValueError for a
    tag whose key the metadata already has or a value that is not printable
    ASCII (nothing is returned then)."""
    data = memoryview(image).cast("B")
    n = int.from_bytes(data[:8], "little")
    head = json.loads(bytes(data[8:8 + n]))
    meta = head["__metadata__"]
    for key, value in tags.items():
        if key in meta:
            raise RingKVValueError(f"tag_image: the snapshot's metadata already has {key!r}")
        if not (isinstance(value, str) and value.isascii() and value.isprintable()):
            raise RingKVValueError(f"tag_image: tag {key!r} = {value!r} is not printable ASCII")
    meta.update(tags)
    meta["header_xxh3"] = _ZEROS.decode()
    text = json.dumps(head, separators=(",", ":"), ensure_ascii=True).encode("ascii")
    text += b" " * (-len(text) % 8)
    first8 = len(text).to_bytes(8, "little")
    digits = _header_digest(first8, text).encode("ascii")
    return b"".join((first8, text.replace(_FIELD + _ZEROS, _FIELD + digits, 1), data[8 + n:]))


def _header_digest(first8: bytes, text: bytes) -> str:
    """``header_xxh3`` (16 hex digits) of a header ``text`` after its 8
    length bytes ``first8``: XXH3-64 of both, the digits of the header's
    own ``"header_xxh3":"`` field read as ``0`` (ValueError: no such
    field)."""
    at = text.index(_FIELD) + len(_FIELD)
    return xxhash.xxh3_64_hexdigest(first8 + text[:at] + _ZEROS + text[at + 16:])


def header_metadata(data: Any) -> dict[str, str]:
    """The ``__metadata__`` (str -> str) of the snapshot header that starts
    ``data`` (an image or ``Model.export_meta``'s bytes), unchecked."""
    n = int.from_bytes(bytes(data[:8]), "little")
    return json.loads(bytes(data[8:8 + n]))["__metadata__"]


def incarnation_of(data: Any) -> str | None:
    """The incarnation (:data:`INCARNATION_KEY`) the snapshot header that
    starts ``data`` names; None when it names none or cannot be read as a
    header at all (the library's own checks then say why)."""
    try:
        value = header_metadata(data).get(INCARNATION_KEY)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    return value if isinstance(value, str) else None


def header_request_id(data: Any) -> str:
    """The request id (str: UTF-8 with ``surrogateescape``, as
    ``SnapshotInfo.request_id``) that the snapshot header starting ``data``
    names (``request_id``, or ``request_id_hex`` for an id that is not
    UTF-8), unchecked; KeyError, ValueError or TypeError when it names none
    or is not a header."""
    h = header_metadata(data)
    return h["request_id"] if "request_id" in h else \
        bytes.fromhex(h["request_id_hex"]).decode("utf-8", "surrogateescape")


def whose(source: Any) -> tuple[str, str | None, int | None]:
    """``(request id, incarnation, frame)`` of a snapshot file (a path),
    image or region metadata (bytes-like), from it alone: the request id as
    ``SnapshotInfo.request_id``, the incarnation (None: none named) and
    ``last_committed`` (None: no frame). A file or image is checked
    completely by the library first (``ringkv.inspect_snapshot``); region
    metadata (a header without data, naming ``session_meta_version``) has
    its header checksum checked here, the rest being checked by the model
    that reserves it. RingKVOSError when the file cannot be read;
    RingKVValueError for damaged or foreign bytes."""
    if isinstance(source, (str, os.PathLike)):
        try:
            with open(source, "rb") as f:
                source = f.read()
        except OSError as exc:
            inspect_snapshot(source)      # the library's RingKVOSError says why, as for a path
            raise RingKVOSError(f"whose: cannot read {os.fsdecode(source)}: "
                                f"{exc.strerror or exc}") from exc
    meta = _region_metadata(source)
    if meta is None:
        info = inspect_snapshot(source)
        return info.request_id, incarnation_of(source), info.last_committed
    try:
        key, frame = header_request_id(source), int(meta["last_committed"])
    except (KeyError, ValueError) as exc:
        raise RingKVValueError(f"whose: region metadata names no request id or frame ({exc})"
                               ) from None
    return key, incarnation_of(source), frame if frame >= 0 else None


def _region_metadata(data: Any) -> dict[str, str] | None:
    """The ``__metadata__`` of ``data`` when it is region metadata (names
    :data:`_META_VERSION_KEY`, nothing after its header), once its header
    checksum matches (RingKVValueError otherwise); None for anything else
    (an image, or bytes whose refusal ``inspect_snapshot`` then explains)."""
    try:
        view = memoryview(data).cast("B")
        n, meta = int.from_bytes(view[:8], "little"), header_metadata(view)
    except (ValueError, KeyError, TypeError):
        return None
    if not isinstance(meta, dict) or _META_VERSION_KEY not in meta or len(view) != 8 + n:
        return None
    try:
        ok = _header_digest(bytes(view[:8]), bytes(view[8:])) == meta.get("header_xxh3")
    except ValueError:
        ok = False
    if not ok:
        raise RingKVValueError("whose: region metadata: header checksum mismatch (damaged, or "
                               "not written by ringkv)")
    return meta


def read_checkpoint(path: str) -> tuple[bytes, SnapshotInfo, dict[str, str]]:
    """Reads the file ``path`` once and checks it completely with the
    library (``inspect_snapshot`` on the bytes: both checksums, tensor
    table, written bits); returns its bytes, its SnapshotInfo and its
    ``__metadata__`` (str -> str). OSError when it cannot be read;
    RingKVValueError (a ValueError) for a damaged or foreign file."""
    with open(path, "rb") as f:
        data = f.read()
    info = inspect_snapshot(data)
    return data, info, header_metadata(data)


def write_atomic(path: str, data: bytes) -> None:
    """Writes ``data`` to ``path`` atomically: a temporary file
    ``TEMP_PREFIX + random`` in the same folder, fsync'ed, renamed over
    ``path``, then the folder fsync'ed (best effort). A failure at any point
    leaves an existing ``path`` as it was and removes the temporary file
    (RingKVOSError, an OSError, naming the path and why: a folder missing,
    ENOSPC or EFBIG from a full disk or file size limit, ...)."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        why = "is not a folder" if os.path.exists(folder) else "does not exist"
        raise RingKVOSError(f"write_atomic: cannot save {path!r}: folder {folder!r}: {why}")
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=TEMP_PREFIX)
    except OSError as exc:
        raise RingKVOSError(f"write_atomic: cannot save {path!r}: cannot create a temporary "
                            f"file in {folder!r}: {exc.strerror or exc}") from exc
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise RingKVOSError(f"write_atomic: cannot save {path!r}: {exc.strerror or exc} "
                                "(the temporary file is removed; an earlier file is kept)"
                                ) from exc
        raise
    try:
        dfd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass

