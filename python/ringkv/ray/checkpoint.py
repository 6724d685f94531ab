"""Checkpoint files, offload images and region metadata of
:mod:`ringkv.ray` (docs/migration.md, "Faults"): snapshot headers
(docs/snapshot-format.md) whose ``__metadata__`` also names the session's
**incarnation**, so that a file (or image, or metadata) alone says whose
it is: ``request_id`` (the C writer's, or ``request_id_hex``),
``last_committed`` (the frame) and :data:`INCARNATION_KEY` (added here);
:func:`whose` reads the three back. A receiver refuses bytes of another
incarnation, or of none, with :class:`IncarnationError`.

The format lets a tool add metadata keys of its own ("Unknown metadata keys
(with string values) are ignored"); no C call writes one, so this module
adds the key to the image ``Model.save_session_bytes`` gives, recomputes
``header_xxh3`` exactly as the C reader checks it (XXH3-64 of the 8 length
bytes and the header with its own 16 digits read as ``0``) and writes the
file atomically itself (:func:`write_atomic`). The data section and its
``data_xxh3`` are the C writer's, byte for byte. Readers check the file
with the library first (``ringkv.inspect_snapshot`` on the bytes read
once), then read the key (:func:`read_checkpoint`).
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
           "write_atomic", "temp_files", "header_metadata", "incarnation_of", "whose"]


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
    field = b'"header_xxh3":"' + _ZEROS + b'"'
    at = text.index(field) + len(b'"header_xxh3":"')
    digits = xxhash.xxh3_64_hexdigest(first8 + text).encode("ascii")
    return b"".join((first8, text[:at], digits, text[at + 16:], data[8 + n:]))


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


def whose(source: Any) -> tuple[str, str | None, int | None]:
    """Whose a snapshot file (a path) or image (bytes-like) is, from it
    alone: ``(request id, incarnation, frame)``, after the library checked
    it completely (``ringkv.inspect_snapshot`` on the bytes, read once):
    the request id as ``SnapshotInfo.request_id``, the incarnation or None
    (none named) and the frame (``last_committed``; None: no frame).
    OSError, or RingKVValueError (a ValueError) for a damaged or foreign
    file."""
    if isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as f:
            source = f.read()
    info = inspect_snapshot(source)
    return info.request_id, incarnation_of(source), info.last_committed


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


def temp_files(folder: str) -> list[str]:
    """Temporary files of unfinished saves in ``folder``: this module's
    (:data:`TEMP_PREFIX`) and the library's (``*.tmp-XXXXXX``,
    ``.ringkv.tmp-XXXXXX``); none may be left once a save returned."""
    return sorted(n for n in os.listdir(folder)
                  if n.startswith(TEMP_PREFIX) or n.startswith(".ringkv.tmp-") or
                  ".safetensors.tmp-" in n)
