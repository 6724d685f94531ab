"""``SessionHost``: one ringkv model and the sessions it steps, as a Ray
actor (one per device, or one per process on the CPU). Written as a plain
class: :func:`ringkv.ray.SessionHost` is ``ray.remote`` of it, and it can
be used without Ray (the tests of the migration protocol do both).

A session on a host is in one of these states:

- **live**: held by the model and stepped by :meth:`step`;
- **frozen**: held, exported for a migration, not stepped (until the
  migration commits, :meth:`release`, or fails, :meth:`thaw`);
- **incoming**: a slot reserved for an import (:meth:`reserve`), not
  stepped, not live until :meth:`commit`;
- **paged out**: its image was handed out (:meth:`offload`), its request id
  reserved by the model until :meth:`page_in`.

:meth:`live` lists the live sessions only: a router that moves sessions
keeps each request live on one host at a time.
"""
from __future__ import annotations

import hashlib
import os
import urllib.parse
from typing import Any, Sequence

from .._args import as_int
from ..model import LayerSpec, Model, ModelConfig
from .stream import PASSES, frame_tokens, step_frame

__all__ = ["SessionHost", "InjectedFailure"]


class InjectedFailure(RuntimeError):
    """A failure a test asked for (:meth:`SessionHost.inject`)."""


class SessionHost:
    """Owns a :class:`ringkv.Model` of ``config`` (a ModelConfig or its
    fields as a dict) and steps its sessions with the deterministic streams
    of :mod:`ringkv.ray.stream`. ``checkpoint_dir``: where a session is
    saved (a snapshot file per request, written atomically) after every
    frame f with (f + 1) % ``checkpoint_every`` == 0; a directory all hosts
    can read (one machine: any folder; a cluster: a shared file system)."""

    def __init__(self, name: str, config: Any, checkpoint_dir: str | None = None,
                 checkpoint_every: int = 0):
        if isinstance(config, dict):  # layers as LayerSpec or (RF, RB, PD) triples
            config = ModelConfig(**{**config, "layers": [
                s if isinstance(s, LayerSpec) else LayerSpec(*s) for s in config["layers"]]})
        self.name = name
        self.model = Model(config)
        self.checkpoint_dir = checkpoint_dir
        self.checkpoint_every = as_int(checkpoint_every, "checkpoint_every")
        self.slots: dict[str, int] = {}      # live and frozen sessions
        self.frozen: set[str] = set()
        self.incoming: dict[str, int] = {}   # reserved for import
        self._inject: dict[str, str] = {}

    # ---- what the host holds ---------------------------------------------
    def ping(self) -> str:
        return self.name

    def pid(self) -> int:
        return os.getpid()

    def live(self) -> dict[str, int | None]:
        """Live sessions (stepped by :meth:`step`) and their clocks."""
        return {rid: self.model.clock(s) for rid, s in self.slots.items()
                if rid not in self.frozen}

    def load(self) -> dict[str, int]:
        """``live``, ``frozen``, ``incoming``, ``paged_out`` counts, ``free``
        slots and ``capacity`` (the model's sessions)."""
        busy = len(self.slots) + len(self.incoming)
        return {"live": len(self.slots) - len(self.frozen), "frozen": len(self.frozen),
                "incoming": len(self.incoming), "paged_out": self.model.offloaded_count,
                "free": self.model.num_sessions - busy, "capacity": self.model.num_sessions}

    def session_digest(self, request_id: str) -> int:
        """XXH3-64 of the session's regions (= its snapshot's data_xxh3)."""
        return self.model.session_digest(self._slot(request_id))

    def clock(self, request_id: str) -> int | None:
        return self.model.clock(self._slot(request_id))

    def _slot(self, request_id: str) -> int:
        try:
            return self.slots[request_id]
        except KeyError:
            raise KeyError(f"host {self.name}: no session holds request {request_id!r}") from None

    # ---- faults, for tests -------------------------------------------------
    def inject(self, step: str, how: str = "raise") -> None:
        """The next call of ``step`` (a method name) fails: ``raise``s
        InjectedFailure before it changes anything, ``die``s (the process
        exits at once, as a crashed worker), or (``fill`` only) ``corrupt``s
        one byte of the data received."""
        self._inject[step] = how

    def _fault(self, step: str) -> str | None:
        how = self._inject.pop(step, None)
        if how == "raise":
            raise InjectedFailure(f"host {self.name}: injected failure in {step}")
        if how == "die":
            os._exit(1)
        return how

    # ---- sessions ------------------------------------------------------------
    def open(self, request_id: str) -> int:
        """Claims a session for a new request (clock none)."""
        self._fault("open")
        if request_id in self.slots or request_id in self.incoming:
            raise RuntimeError(f"host {self.name}: request {request_id!r} is already here")
        s = self.model.claim(request_id)
        self.slots[request_id] = s
        return s

    def close(self, request_id: str) -> None:
        """Releases a session for good."""
        s = self._slot(request_id)
        self.model.release(s)
        del self.slots[request_id]
        self.frozen.discard(request_id)

    def step(self, request_ids: Sequence[str]) -> dict[str, dict]:
        """One frame of each listed live session, as one batch: each at its
        clock + 1 (0 without a clock). Returns per request ``frame``,
        ``digest`` (of the frame's attention outputs), ``checkpoint``
        (the frame saved after it, or None) and ``checkpoint_error`` (None,
        or why the checkpoint due after this frame could not be saved,
        e.g. a full disk: the frame itself is done and the previous
        checkpoint file is left as it was, the saves being atomic). Raises
        before any session steps when a request is not live here."""
        self._fault("step")
        rids = list(request_ids)
        for rid in rids:
            if rid not in self.slots or rid in self.frozen:
                state = "frozen for a migration" if rid in self.frozen else "not live here"
                raise RuntimeError(f"host {self.name}: request {rid!r} is {state}")
        if not rids:
            return {}
        slots = [self.slots[r] for r in rids]
        frames = [(self.model.clock(s) if self.model.clock(s) is not None else -1) + 1
                  for s in slots]
        # Every checkpoint file name before the frame (a name cannot fail
        # after the clocks moved); checkpoint_path always gives one that fits.
        paths = [checkpoint_path(self.checkpoint_dir, rid)
                 if self.checkpoint_dir and self.checkpoint_every > 0 and
                 (f + 1) % self.checkpoint_every == 0 else None
                 for rid, f in zip(rids, frames)]
        digests = step_frame(self.model, slots, rids, frames)
        out = {}
        for rid, s, f, d, path in zip(rids, slots, frames, digests, paths):
            saved, error = None, None
            if path is not None:
                try:
                    self.model.save_session(s, path)
                    saved = f
                except Exception as exc:  # noqa: BLE001 - the frame is done: report, go on
                    error = f"{type(exc).__name__}: {exc}"
            out[rid] = {"frame": f, "digest": d, "checkpoint": saved, "checkpoint_error": error}
        return out

    def prefill(self, request_id: str, frames: int) -> int | None:
        """Advances a live session by ``frames`` frames of the commit pass
        only, no attention, every layer fed layer 0's deterministic tokens:
        fills its rings quickly, for benchmarks (its digests then differ
        from :meth:`step`'s). Returns its clock."""
        s = self._slot(request_id)
        cfg = self.model.config
        for _ in range(as_int(frames, "frames")):
            clock = self.model.clock(s)
            f = 0 if clock is None else clock + 1
            self.model.begin_frame([s], [f])
            kv, _ = frame_tokens(cfg, request_id, f, PASSES - 1, 0)
            for layer in range(cfg.n_layers):
                self.model.upsert(layer, [s], kv, True)
        return self.model.clock(s)

    def restore(self, request_id: str, path: str) -> int | None:
        """Claims a session for ``request_id`` and loads the checkpoint file
        ``path`` into it (bit-exact, its clock); returns the clock. A
        refused file leaves nothing claimed."""
        self._fault("restore")
        s = self.open(request_id)
        try:
            self.model.load_session(s, path)
        except BaseException:
            self.close(request_id)
            raise
        return self.model.clock(s)

    # ---- migration: the source's side ------------------------------------------
    def meta(self, request_id: str) -> bytes:
        """A live session's metadata (read only: the destination reserves a
        slot with it before the source freezes anything)."""
        self._fault("meta")
        return self.model.export_meta(self._slot(request_id))

    def export(self, request_id: str) -> tuple[bytes, int, list]:
        """Freezes a live session (no step until :meth:`release` or
        :meth:`thaw`) and returns its metadata, the digest of its regions
        and the regions' bytes (NumPy views of the model's memory; Ray
        copies them into its object store when this returns, as the third
        of ``num_returns=3`` results). Nothing changes on failure."""
        self._fault("export")
        s = self._slot(request_id)
        if request_id in self.frozen:
            raise RuntimeError(f"host {self.name}: request {request_id!r} is already being moved")
        meta = self.model.export_meta(s)
        digest = self.model.session_digest(s)
        arrays = [r.array for r in self.model.session_regions(s)]
        self.frozen.add(request_id)
        return meta, digest, arrays

    def thaw(self, request_id: str) -> None:
        """A migration of this session failed: it is live here again."""
        self._slot(request_id)
        self.frozen.discard(request_id)

    def release(self, request_id: str) -> None:
        """The migration committed at the destination: the frozen copy here is
        released (zeroed, slot free)."""
        self._fault("release")
        if request_id not in self.frozen:
            raise RuntimeError(f"host {self.name}: request {request_id!r} is not frozen for a "
                               "migration; only an exported session is released this way")
        self.close(request_id)

    # ---- migration: the destination's side ---------------------------------------
    def reserve(self, meta: bytes) -> int:
        """Reserves a slot for the session ``meta`` describes (refused, with
        nothing changed, when there is no room or it is here already)."""
        self._fault("reserve")
        s = self.model.import_reserve(meta)
        rid = _request_id_of(meta)
        self.incoming[rid] = s
        return s

    def fill(self, request_id: str, arrays: list, digest: int) -> int:
        """Copies the regions' bytes (from the object store) into the
        reserved slot, then verifies: the digest of the slot's regions must
        equal the source's, and the import checks must pass. Returns the
        bytes copied. Raises on a mismatch (the slot stays reserved)."""
        how = self._fault("fill")
        s = self.incoming[request_id]
        regions = self.model.session_regions(s)
        if len(arrays) != len(regions):
            raise RuntimeError(f"host {self.name}: {len(arrays)} regions received for "
                               f"{request_id!r}; the slot has {len(regions)}")
        moved = 0
        for r, a in zip(regions, arrays):
            r.array[:] = a
            moved += r.nbytes
        if how == "corrupt":
            regions[0].array[0] ^= 0x01
        got = self.model.session_digest(s)
        if got != digest:
            raise RuntimeError(f"host {self.name}: the regions of {request_id!r} arrived "
                               f"damaged (digest {got:016x}, the source's {digest:016x})")
        return moved

    def commit(self, request_id: str, meta: bytes) -> int | None:
        """Imports the filled slot (its checks again): the session is live
        here from now on. Returns its clock."""
        self._fault("commit")
        s = self.incoming[request_id]
        self.model.import_session(s, meta)
        del self.incoming[request_id]
        self.slots[request_id] = s
        return self.model.clock(s)

    def cancel(self, request_id: str) -> None:
        """Drops a reservation (the slot is zeroed and free)."""
        s = self.incoming.pop(request_id, None)
        if s is not None:
            self.model.import_cancel(s)

    # ---- offload -------------------------------------------------------------------
    def offload(self, request_id: str, path: str | None = None) -> bytearray | None:
        """Pages a live session out: its image is returned (into Ray's object
        store), or written to ``path``; its slot is free and its request id
        reserved until :meth:`page_in` here."""
        self._fault("offload")
        s = self._slot(request_id)
        if request_id in self.frozen:
            raise RuntimeError(f"host {self.name}: request {request_id!r} is being moved")
        if path is None:
            image = self.model.offload(s)
        else:
            self.model.offload_to_file(s, path)
            image = None
        del self.slots[request_id]
        return image

    def page_in(self, image: Any = None, path: str | None = None) -> str:
        """Brings a paged-out session back (from its image or its file) into
        a free slot; returns its request id. It is live again."""
        self._fault("page_in")
        s = self.model.page_in_file(path) if path is not None else self.model.page_in(image)
        rid = _request_id_of(self.model.export_meta(s))
        self.slots[rid] = s
        return rid


def _request_id_of(meta: bytes) -> str:
    """The request id stored in a session metadata blob (docs/migration.md:
    256 bytes at offset 72, NUL-padded)."""
    return bytes(meta[72:72 + 256]).split(b"\0", 1)[0].decode("utf-8", "surrogateescape")


#: Longest checkpoint file name: NAME_MAX (255 bytes) less the ".tmp-XXXXXX"
#: the atomic save appends to its temporary file (a longer name would save
#: too, under a short temporary name; the limit keeps the names as they are).
CHECKPOINT_NAME_MAX = 255 - len(".tmp-XXXXXX")
#: Characters of the quoted id kept in front of the hash in a long id's name.
_CHECKPOINT_PREFIX = 96


def checkpoint_path(directory: str, request_id: str | bytes) -> str:
    """The checkpoint file of a request in ``directory``: its id (str, UTF-8,
    a lone surrogate as the byte it escapes, as ``os.fsencode``; or bytes)
    percent-quoted (``urllib.parse.quote(raw, safe="")``) plus
    ``.safetensors``, when that name has at most CHECKPOINT_NAME_MAX (244)
    characters (the names of earlier versions, so their checkpoints still
    load). A longer one (ids of up to 255 bytes are valid; quoting can
    triple them) is named by the first 96 characters of the quoted id (cut
    before a ``%XX`` escape), ``%_``, the SHA-256 of the raw id (64 hex
    digits) and ``.safetensors``: 174 characters at most. Stable across
    processes and versions; two ids never share a name (quoting never
    writes ``%_``, so a hashed name is never a short one's, and two hashed
    names differ by their hash)."""
    raw = request_id if isinstance(request_id, bytes) else \
        request_id.encode("utf-8", "surrogateescape")
    quoted = urllib.parse.quote(raw, safe="")
    name = quoted + ".safetensors"
    if len(name) > CHECKPOINT_NAME_MAX:
        cut = _CHECKPOINT_PREFIX
        esc = quoted.rfind("%", cut - 2, cut)  # a %XX escape the cut would split
        if esc >= 0:
            cut = esc
        name = f"{quoted[:cut]}%_{hashlib.sha256(raw).hexdigest()}.safetensors"
    return os.path.join(directory, name)
