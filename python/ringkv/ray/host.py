"""``SessionHost``: one ringkv model and the sessions it steps, as a Ray
actor (:func:`ringkv.ray.SessionHost` is ``ray.remote`` of this plain
class, which the migration protocol's tests also use without Ray).

The host is the authority for what is live on it (docs/migration.md,
"Faults"). Every call from a router names the host incarnation it expects
(``token=``, :attr:`SessionHost.token`, drawn by the constructor, so a
host Ray restarted, empty, has another: :class:`StaleHostError`) and the
session incarnation it means (``inc=``: drawn at each ``open`` of an id,
kept through moves, page-outs and restores; :class:`IncarnationError`).
A session here is live (stepped), frozen (:meth:`export`), incoming (a
slot :meth:`reserve` took), paged out (:meth:`offload`) or parked (a
record only, :meth:`park`); each method's docstring says how it gets there
and back.

Request ids are str or bytes, one id in either form (:func:`request_key`);
every result is keyed by the str.
"""
from __future__ import annotations

import functools
import hashlib
import inspect
import os
import resource
import secrets
import threading
import urllib.parse
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from .._args import as_int
from ..errors import RingKVRuntimeError, RingKVValueError
from ..model import LayerSpec, Model, ModelConfig, inspect_snapshot
from .checkpoint import (INCARNATION_KEY, IncarnationError, header_request_id, incarnation_of,
                         read_checkpoint, tag_image, write_atomic)
from .stream import PASSES, frame_tokens, model_id, request_key, step_frame

__all__ = ["SessionHost", "InjectedFailure", "StaleHostError", "IncarnationError",
           "FAULT_POINTS", "FAULT_ACTIONS", "request_key", "model_id", "new_incarnation",
           "checkpoint_path"]


class InjectedFailure(RuntimeError):
    """A failure a test asked for (:meth:`SessionHost.inject`)."""


class StaleHostError(RuntimeError):
    """A call named another host incarnation's token than this host's: the
    host restarted since the caller last saw it (it holds nothing of
    before), so the caller must treat the host it knew as dead."""


#: Fault points and actions of :meth:`SessionHost.inject` (docs/migration.md,
#: "Fault injection", says what each point and action is).
FAULT_METHODS = ("open", "close", "step", "recover", "restore", "meta", "export", "thaw",
                 "release", "reserve", "fill", "commit", "cancel", "offload", "page_in",
                 "discard", "park", "unpark", "retire")
FAULT_POINTS = tuple(f"{m}{s}" for m in FAULT_METHODS
                     for s in ("", ".before_reply", ".after_reply")) + \
    ("step.before_checkpoint", "step.after_checkpoint")
FAULT_ACTIONS = ("raise", "die", "corrupt", "disk_full", "hang")
#: Seconds a ``hang`` fault blocks when nothing kills the process.
HANG_LIMIT_S = 600.0


def new_incarnation() -> str:
    """A fresh incarnation token: 16 lowercase hex digits (64 random bits)."""
    return secrets.token_hex(8)


@dataclass
class _Held:
    """A session held by the model (live or frozen)."""
    slot: int
    inc: str
    frozen: bool = False
    delivered: int = -1       # the last frame the router said was delivered


@dataclass
class _Incoming:
    """A slot reserved for an import; ``digest`` once its fill verified."""
    slot: int
    inc: str
    digest: int | None = None


def _entry(fn: Callable) -> Callable:
    """A method a router calls: a death armed by an ``after_reply`` fault
    happens first; ``token=`` (when given) must be this host's; then the
    fault points ``NAME`` (on entry) and, after the effect,
    ``NAME.before_reply`` and ``NAME.after_reply``."""
    name = fn.__name__

    @functools.wraps(fn)
    def call(self: "SessionHost", *args: Any, token: str | None = None, **kwargs: Any) -> Any:
        if self._die_next:
            os._exit(1)
        if token is not None and token != self.token:
            raise StaleHostError(f"host {self.name}: the call names host incarnation {token}; "
                                 f"this host is incarnation {self.token} (it restarted and "
                                 "holds nothing of before)")
        how = self._fault(name)
        out = fn(self, *args, _how=how, **kwargs) if name == "fill" else fn(self, *args, **kwargs)
        self._fault(f"{name}.before_reply")
        if self._inject.pop(f"{name}.after_reply", None) is not None:
            self._die_next = True
        return out
    # Ray checks a call's arguments against the method's signature, found
    # by inspect.unwrap (so no __wrapped__ here): the method's own plus
    # token, less the private _how
    del call.__wrapped__  # type: ignore[attr-defined]
    sig = inspect.signature(fn)
    params = [p for n, p in sig.parameters.items() if n != "_how"]
    call.__signature__ = sig.replace(parameters=params + [  # type: ignore[attr-defined]
        inspect.Parameter("token", inspect.Parameter.KEYWORD_ONLY, default=None)])
    return call


class SessionHost:
    """Owns a :class:`ringkv.Model` of ``config`` (a ModelConfig or its
    fields as a dict) and steps its sessions with the deterministic streams
    of :mod:`ringkv.ray.stream`. ``checkpoint_dir``: where a session is
    saved (one snapshot file per request, :func:`checkpoint_path`, written
    atomically, its incarnation in the metadata:
    :mod:`ringkv.ray.checkpoint`) after every frame f with (f + 1) %
    ``checkpoint_every`` == 0; a directory all hosts can read (one machine:
    any folder; a cluster: a shared file system)."""

    def __init__(self, name: str, config: Any, checkpoint_dir: str | None = None,
                 checkpoint_every: int = 0):
        if isinstance(config, dict):  # layers as LayerSpec or (RF, RB, PD) triples
            config = ModelConfig(**{**config, "layers": [
                s if isinstance(s, LayerSpec) else LayerSpec(*s) for s in config["layers"]]})
        self.name = name
        self.model = Model(config)
        self.checkpoint_dir = checkpoint_dir
        self.checkpoint_every = as_int(checkpoint_every, "checkpoint_every")
        self.token = new_incarnation()    #: this host's incarnation (a restart draws another)
        self.held: dict[str, _Held] = {}          # live and frozen sessions
        self.incoming: dict[str, _Incoming] = {}  # reserved for import
        self.paged: dict[str, tuple[str, int]] = {}    # paged out: (inc, delivered)
        self.parked: dict[str, dict] = {}         # records of sessions not held anywhere
        self._inject: dict[str, str] = {}
        self._die_next = False

    # ---- what the host holds ---------------------------------------------
    @_entry
    def ping(self) -> str:
        return self.name

    @_entry
    def identity(self) -> str:
        """This host's incarnation token (:attr:`token`)."""
        return self.token

    def pid(self) -> int:
        return os.getpid()

    def live(self) -> dict[str, int | None]:
        """Live sessions (stepped by :meth:`step`) and their clocks."""
        return {rid: self.model.clock(h.slot) for rid, h in self.held.items() if not h.frozen}

    @_entry
    def inventory(self) -> dict:
        """Everything this host knows of its sessions: ``token``,
        ``capacity`` (the model's sessions); ``held``
        (request -> incarnation, clock, last delivered frame, frozen);
        ``incoming`` (request -> incarnation, verified); ``paged`` (request
        -> incarnation, last delivered frame); ``parked`` (request -> the
        record :meth:`park` was given)."""
        return {"token": self.token, "capacity": self.model.num_sessions,
                "held": {r: {"inc": h.inc, "clock": self.model.clock(h.slot),
                             "delivered": h.delivered, "frozen": h.frozen}
                         for r, h in self.held.items()},
                "incoming": {r: {"inc": i.inc, "verified": i.digest is not None}
                             for r, i in self.incoming.items()},
                "paged": {r: {"inc": inc, "delivered": d} for r, (inc, d) in self.paged.items()},
                "parked": dict(self.parked)}

    def load(self) -> dict[str, int]:
        """``live``, ``frozen``, ``incoming``, ``paged_out`` counts, ``free``
        slots and ``capacity`` (the model's sessions)."""
        frozen = sum(1 for h in self.held.values() if h.frozen)
        busy = len(self.held) + len(self.incoming)
        return {"live": len(self.held) - frozen, "frozen": frozen,
                "incoming": len(self.incoming), "paged_out": self.model.offloaded_count,
                "free": self.model.num_sessions - busy, "capacity": self.model.num_sessions}

    @_entry
    def status(self, request_id: Any = None) -> dict:
        """:meth:`load` with this host's ``token`` and what it knows of
        ``request_id`` (``state``: live, frozen, incoming, paged, parked or
        None, and ``inc``; ``clock`` of a held one; ``verified`` for a
        reserved slot whose fill verified): one call for a router."""
        out = {"token": self.token, **self.load(), "state": None, "inc": None}
        if request_id is not None:
            key = request_key(request_id)
            if key in self.held:
                h = self.held[key]
                out.update(state="frozen" if h.frozen else "live", inc=h.inc,
                           clock=self.model.clock(h.slot))
            elif key in self.incoming:
                out.update(state="incoming", inc=self.incoming[key].inc,
                           verified=self.incoming[key].digest is not None)
            elif key in self.paged:
                out.update(state="paged", inc=self.paged[key][0])
            elif key in self.parked:
                out.update(state="parked", inc=self.parked[key]["inc"])
        return out

    def session_digest(self, request_id: Any) -> int:
        """XXH3-64 of the session's regions (= its snapshot's data_xxh3)."""
        return self.model.session_digest(self._held(request_id).slot)

    @_entry
    def clock(self, request_id: Any) -> int | None:
        """A held session's clock (None: no frame committed)."""
        return self.model.clock(self._held(request_id).slot)

    def _held(self, request_id: Any, inc: str | None = None, live: bool = False) -> _Held:
        """The session held for ``request_id`` (KeyError: none), of
        incarnation ``inc`` (None: any); with ``live``, not frozen."""
        key = request_key(request_id)
        h = self.held.get(key)
        if h is None:
            raise KeyError(f"host {self.name}: no session holds request {key!r}")
        self._same(key, h.inc, inc)
        if live and h.frozen:
            raise RingKVRuntimeError(f"host {self.name}: request {key!r} is frozen for a "
                                     "migration")
        return h

    def _same(self, key: str, have: str, inc: str | None, what: str = "request") -> None:
        """IncarnationError (a RingKVRuntimeError) unless the caller's
        incarnation ``inc`` (None: any) is the one held here."""
        if inc is not None and have != inc:
            raise IncarnationError(f"host {self.name}: {what} {key!r} is incarnation {have} "
                                   f"here, not {inc}")

    def _named(self, key: str, data: Any, want: str | None, what: str) -> str:
        """The incarnation that ``data`` (an image or region metadata of
        request ``key``) names in its snapshot header, which must be ``want``
        (None: any, but one): IncarnationError otherwise, before anything
        changes."""
        got = incarnation_of(data)
        if got is None:
            raise IncarnationError(f"host {self.name}: the {what} of request {key!r} "
                                   f"{_NO_INCARNATION}, nothing changed")
        if want is not None and got != want:
            raise IncarnationError(f"host {self.name}: the {what} of request {key!r} is of "
                                   f"incarnation {got}, not {want}; refused, nothing changed")
        return got

    def _image_key(self, image: Any, want: str | None = None) -> str:
        """The request (str key) a snapshot image names, once the library
        checked it; RingKVRuntimeError unless it is ``want`` (when given)."""
        key = request_key(inspect_snapshot(image).request_id_bytes)
        if want is not None and key != want:
            raise RingKVRuntimeError(f"host {self.name}: the image is of request {key!r}, "
                                     f"not {want!r}")
        return key

    # ---- faults, for tests -------------------------------------------------
    def inject(self, point: str, how: str = "raise") -> None:
        """The next time the host reaches fault point ``point`` (one of
        :data:`FAULT_POINTS`; a method's name is its entry) it does ``how``
        (one of :data:`FAULT_ACTIONS`). Deterministic: the point is a place
        in the code, not a time. RingKVRuntimeError for an unknown point or
        action (nothing armed)."""
        for what, name, known in (("point", point, FAULT_POINTS), ("action", how, FAULT_ACTIONS)):
            if name not in known:
                raise RingKVRuntimeError(f"host {self.name}: no fault {what} {name!r}; {what}s: "
                                         f"{', '.join(known)}")
        self._inject[point] = how

    def _fault(self, point: str) -> str | None:
        how = self._inject.pop(point, None)
        if how == "raise":
            raise InjectedFailure(f"host {self.name}: injected failure in {point}")
        if how == "die":
            os._exit(1)
        if how == "hang":
            threading.Event().wait(HANG_LIMIT_S)      # nothing sets it: until killed
            raise InjectedFailure(f"host {self.name}: hung in {point} for {HANG_LIMIT_S:g} s "
                                  "and was not killed")
        return how

    # ---- sessions ------------------------------------------------------------
    def _claim(self, key: str, inc: str, delivered: int = -1) -> _Held:
        if key in self.held or key in self.incoming or key in self.paged:
            raise RingKVRuntimeError(f"host {self.name}: request {key!r} is already here")
        h = _Held(self.model.claim(model_id(key)), inc, delivered=delivered)
        self.held[key] = h
        self.parked.pop(key, None)
        return h

    @_entry
    def open(self, request_id: Any, inc: str | None = None) -> int:
        """Claims a session for a new request (clock none) as incarnation
        ``inc`` (default: a new one); returns the slot."""
        return self._claim(request_key(request_id), inc or new_incarnation()).slot

    @_entry
    def close(self, request_id: Any, inc: str | None = None) -> None:
        """Releases a session for good and retires its incarnation: its
        checkpoint file is removed (:meth:`retire`)."""
        key = request_key(request_id)
        h = self._held(key, inc)
        self._drop(key)
        self._retire(key, h.inc)

    @_entry
    def retire(self, request_id: Any, inc: str) -> bool:
        """Removes the checkpoint file of ``request_id`` if it is incarnation
        ``inc``'s (or carries none); returns whether one was removed. The
        router retires this way a session it closes whose host died."""
        key = request_key(request_id)
        self.parked.pop(key, None)
        return self._retire(key, inc)

    def _retire(self, key: str, inc: str) -> bool:
        if not self.checkpoint_dir:
            return False
        path = checkpoint_path(self.checkpoint_dir, key)
        try:
            _, _, meta = read_checkpoint(path)
            if meta.get(INCARNATION_KEY, inc) != inc:
                return False              # another incarnation's: not ours to remove
        except FileNotFoundError:
            return False
        except (OSError, ValueError):
            pass                          # damaged: of no use to anyone
        try:
            os.unlink(path)
            return True
        except FileNotFoundError:
            return False

    @_entry
    def step(self, items: Sequence[Any]) -> dict[str, dict]:
        """One frame of each listed live session, as one batch: each at its
        clock + 1 (0 without a clock). ``items``: request ids, or
        ``(request id, incarnation, last delivered frame)`` triples (a
        router's: the incarnation must be the session's; the frame is
        recorded, for a router rebuilt later). Returns per request (str
        key) ``frame``, ``digest`` (of the frame's attention outputs),
        ``inc``, ``checkpoint`` (the frame saved after it, or None) and
        ``checkpoint_error`` (None, or why the checkpoint due could not be
        saved: the frame is done, the previous file kept). Raises before any
        session steps when a request is not live here or is another
        incarnation."""
        rows = [(request_key(i), None, None) if not isinstance(i, (tuple, list)) else
                (request_key(i[0]), i[1], i[2]) for i in items]
        for key, inc, _ in rows:
            h = self.held.get(key)
            if h is None or h.frozen:
                state = "frozen for a migration" if h is not None else "not live here"
                raise RingKVRuntimeError(f"host {self.name}: request {key!r} is {state}")
            self._same(key, h.inc, inc)
        if not rows:
            return {}
        for key, _, delivered in rows:
            if delivered is not None:
                self.held[key].delivered = max(self.held[key].delivered, delivered)
        keys = [k for k, _, _ in rows]
        slots = [self.held[k].slot for k in keys]
        frames = [(self.model.clock(s) if self.model.clock(s) is not None else -1) + 1
                  for s in slots]
        # Every checkpoint file name before the frame (a name cannot fail
        # after the clocks moved); checkpoint_path always gives one that fits.
        paths = [checkpoint_path(self.checkpoint_dir, k)
                 if self.checkpoint_dir and self.checkpoint_every > 0 and
                 (f + 1) % self.checkpoint_every == 0 else None
                 for k, f in zip(keys, frames)]
        digests = step_frame(self.model, slots, keys, frames)
        how = self._fault("step.before_checkpoint")
        limit = resource.getrlimit(resource.RLIMIT_FSIZE) if how == "disk_full" else None
        out = {}
        try:
            if limit is not None:
                resource.setrlimit(resource.RLIMIT_FSIZE, (4096, limit[1]))
            for k, s, f, d, path in zip(keys, slots, frames, digests, paths):
                saved, error = None, None
                if path is not None:
                    try:
                        write_atomic(path, tag_image(self.model.save_session_bytes(s),
                                                     {INCARNATION_KEY: self.held[k].inc}))
                        saved = f
                    except Exception as exc:  # noqa: BLE001 - the frame is done: report, go on
                        error = f"{type(exc).__name__}: {exc}"
                out[k] = {"frame": f, "digest": d, "inc": self.held[k].inc, "checkpoint": saved,
                          "checkpoint_error": error}
        finally:
            if limit is not None:
                resource.setrlimit(resource.RLIMIT_FSIZE, limit)
        if self._fault("step.after_checkpoint") == "corrupt":
            for p in paths:
                if p is not None and os.path.exists(p):
                    _flip_last_byte(p)
        return out

    def prefill(self, request_id: Any, frames: int) -> int | None:
        """Advances a live session by ``frames`` frames of the commit pass
        only, no attention, every layer fed layer 0's deterministic tokens:
        fills its rings quickly, for benchmarks (its digests then differ
        from :meth:`step`'s). Returns its clock."""
        key = request_key(request_id)
        s = self._held(key).slot
        cfg = self.model.config
        for _ in range(as_int(frames, "frames")):
            clock = self.model.clock(s)
            f = 0 if clock is None else clock + 1
            self.model.begin_frame([s], [f])
            kv, _ = frame_tokens(cfg, key, f, PASSES - 1, 0)
            for layer in range(cfg.n_layers):
                self.model.upsert(layer, [s], kv, True)
        return self.model.clock(s)

    @_entry
    def restore(self, request_id: Any, path: str, inc: str | None = None) -> int | None:
        """Claims a session for ``request_id`` and loads the checkpoint file
        ``path`` into it (bit-exact, its clock); returns the clock. The
        file must name the request and an incarnation (``inc`` when given;
        otherwise the session takes the file's). A refused file leaves
        nothing claimed (RingKVValueError saying why)."""
        key = request_key(request_id)
        data, file_inc = _checked_checkpoint(path, key, inc)
        h = self._claim(key, file_inc)
        try:
            self.model.load_session_bytes(h.slot, data)
        except BaseException:
            self._drop(key)
            raise
        return self.model.clock(h.slot)

    @_entry
    def recover(self, request_id: Any, inc: str, upto: int, image: Any = None,
                digest: int | None = None) -> dict:
        """Brings back incarnation ``inc`` of a request whose host died or
        whose image is gone, up to frame ``upto`` (its last delivered frame;
        -1: none): claims a slot, loads ``image`` (e.g. its paged-out image)
        or else its checkpoint file if valid and of this incarnation (else
        refused and named), or starts empty; then replays the frames after
        that state up to ``upto``, checking frame ``upto``'s against
        ``digest`` (the delivered one). Returns ``resumed_from`` (the frame of the state loaded,
        None: empty), ``source`` (image, checkpoint, empty), ``refused``
        (why the checkpoint was not used, or None), ``clock`` (afterwards:
        max(upto, resumed_from)), ``replayed`` (frames recomputed) and
        ``digest_ok`` (None when nothing to compare). Nothing stays claimed
        on failure."""
        key = request_key(request_id)
        h = self._claim(key, inc, delivered=upto)
        try:
            source, refused = "empty", None
            if image is not None:
                self._image_key(image, key)
                self._named(key, image, inc, "image")
                self.model.load_session_bytes(h.slot, image)
                source = "image"
            elif self.checkpoint_dir:
                path = checkpoint_path(self.checkpoint_dir, key)
                try:
                    data, _ = _checked_checkpoint(path, key, inc)
                    self.model.load_session_bytes(h.slot, data)
                    source = "checkpoint"
                except FileNotFoundError:
                    pass
                except (OSError, ValueError, RuntimeError) as exc:
                    refused = f"{type(exc).__name__}: {exc}"
            clock = self.model.clock(h.slot)
            resumed = clock if source != "empty" else None
            start = -1 if clock is None else clock
            replayed = list(range(start + 1, upto + 1))
            got = [step_frame(self.model, [h.slot], [key], [f])[0] for f in replayed]
            ok = None if digest is None or not got else got[-1] == digest
        except BaseException:
            self._drop(key)
            raise
        return {"resumed_from": resumed, "source": source, "refused": refused,
                "clock": self.model.clock(h.slot), "replayed": replayed, "digest_ok": ok}

    def _drop(self, key: str) -> None:
        h = self.held.pop(key, None)
        if h is not None:
            self.model.release(h.slot)

    @_entry
    def park(self, request_id: Any, record: dict) -> None:
        """Keeps the record of a session held nowhere (its host died, no
        room anywhere yet): for a router rebuilt from the hosts."""
        self.parked[request_key(request_id)] = dict(record)

    @_entry
    def unpark(self, request_id: Any) -> None:
        self.parked.pop(request_key(request_id), None)

    # ---- migration: the source's side ------------------------------------------
    @_entry
    def meta(self, request_id: Any, inc: str | None = None) -> bytes:
        """A live session's metadata (read only: the destination reserves a
        slot with it before the source freezes anything): its snapshot
        header, which names request, frame and (added here) incarnation."""
        h = self._held(request_id, inc)
        return tag_image(self.model.export_meta(h.slot), {INCARNATION_KEY: h.inc})

    @_entry
    def export(self, request_id: Any, inc: str | None = None) -> tuple[bytes, int, list]:
        """Freezes a live session (no step until :meth:`release` or
        :meth:`thaw`) and returns its metadata, the digest of its regions
        and the regions' bytes (NumPy views of the model's memory; Ray
        copies them into its object store when this returns, as the third
        of ``num_returns=3`` results); the metadata names its incarnation,
        as :meth:`meta`'s. Nothing changes on failure."""
        h = self._held(request_id, inc, live=True)
        meta = tag_image(self.model.export_meta(h.slot), {INCARNATION_KEY: h.inc})
        digest = self.model.session_digest(h.slot)
        arrays = [r.array for r in self.model.session_regions(h.slot)]
        h.frozen = True
        return meta, digest, arrays

    @_entry
    def thaw(self, request_id: Any, inc: str | None = None) -> None:
        """A migration of this session failed: it is live here again."""
        self._held(request_id, inc).frozen = False

    @_entry
    def release(self, request_id: Any, inc: str | None = None) -> None:
        """The migration committed at the destination: the frozen copy here is
        released (zeroed, slot free; the checkpoint file stays: the
        incarnation lives on there)."""
        key = request_key(request_id)
        h = self._held(key, inc)
        if not h.frozen:
            raise RingKVRuntimeError(f"host {self.name}: request {key!r} is not frozen for a "
                                     "migration; only an exported session is released this way")
        self._drop(key)

    # ---- migration: the destination's side ---------------------------------------
    @_entry
    def reserve(self, meta: bytes, inc: str | None = None) -> int:
        """Reserves a slot for the session ``meta`` describes (a source's
        :meth:`meta`), as the incarnation ``meta`` names, which must be
        ``inc`` when given (IncarnationError for metadata of another
        incarnation or of none; the library refuses bad bytes, no room or an
        id here already; nothing changed either way)."""
        try:
            key = header_request_id(meta)
        except (ValueError, KeyError, TypeError):
            key = None                    # not a readable header: the library says why
        named = self._named(key, meta, inc, "region metadata") if key is not None else ""
        s = self.model.import_reserve(meta)
        if key is None:                   # bytes the library took and this cannot read
            self.model.import_cancel(s)
            raise RingKVRuntimeError(f"host {self.name}: unreadable region metadata")
        self.incoming[key] = _Incoming(s, named)
        return s

    def _incoming(self, request_id: Any, inc: str | None) -> tuple[str, _Incoming]:
        key = request_key(request_id)
        i = self.incoming.get(key)
        if i is None:
            raise RingKVRuntimeError(f"host {self.name}: no slot is reserved for request {key!r}")
        self._same(key, i.inc, inc, "the slot reserved for")
        return key, i

    @_entry
    def fill(self, request_id: Any, arrays: list, digest: int, inc: str | None = None,
             _how: str | None = None) -> int:
        """Copies the regions' bytes (from the object store) into the
        reserved slot, then verifies: the digest of the slot's regions must
        equal the source's. Returns the bytes copied. Raises on a mismatch
        (the slot stays reserved, unverified: :meth:`commit` refuses it)."""
        key, i = self._incoming(request_id, inc)
        i.digest = None
        regions = self.model.session_regions(i.slot)
        if len(arrays) != len(regions):
            raise RingKVRuntimeError(f"host {self.name}: {len(arrays)} regions received for "
                                     f"{key!r}; the slot has {len(regions)}")
        for r, a in zip(regions, arrays):
            r.array[:] = a
        if _how == "corrupt":
            regions[0].array[0] ^= 0x01
        got = self.model.session_digest(i.slot)
        if got != digest:
            raise RingKVRuntimeError(f"host {self.name}: the regions of {key!r} arrived "
                                     f"damaged (digest {got:016x}, the source's {digest:016x})")
        i.digest = got
        return sum(r.nbytes for r in regions)

    @_entry
    def commit(self, request_id: Any, meta: bytes, inc: str | None = None,
               delivered: int = -1) -> int | None:
        """Imports the filled slot (its checks again): the session is live
        here from now on. Refused, nothing changed, unless the last
        :meth:`fill` of the slot verified it (only fill writes a reserved
        slot's regions). Returns its clock."""
        key, i = self._incoming(request_id, inc)
        self._named(key, meta, i.inc, "region metadata")
        if i.digest is None:
            raise RingKVRuntimeError(f"host {self.name}: the slot reserved for {key!r} holds "
                                     "no verified copy (its fill failed or never ran); "
                                     "refusing to import it")
        self.model.import_session(i.slot, meta)
        del self.incoming[key]
        self.held[key] = _Held(i.slot, i.inc, delivered=delivered)
        self.parked.pop(key, None)
        return self.model.clock(i.slot)

    @_entry
    def cancel(self, request_id: Any, inc: str | None = None) -> None:
        """Drops a reservation (the slot is zeroed and free); none: nothing."""
        key = request_key(request_id)
        i = self.incoming.get(key)
        if i is not None and (inc is None or i.inc == inc):
            del self.incoming[key]
            self.model.import_cancel(i.slot)

    # ---- offload -------------------------------------------------------------------
    @_entry
    def offload(self, request_id: Any, path: str | None = None, inc: str | None = None
                ) -> tuple[bytes | None, int]:
        """Pages a live session out: its image (into Ray's object store, the
        first of ``num_returns=2`` results), or None when written to
        ``path`` (atomically, :func:`write_atomic`), and its size in bytes;
        its slot is free and its request id reserved until :meth:`page_in`
        here (or :meth:`discard`); its header names its incarnation too
        (:func:`ringkv.ray.checkpoint.whose`). A file that cannot be written
        leaves the session live here (paged back in from the image: the
        same state) and raises RingKVOSError."""
        key = request_key(request_id)
        h = self._held(key, inc, live=True)
        image = tag_image(self.model.offload(h.slot), {INCARNATION_KEY: h.inc})
        if path is not None:
            try:
                write_atomic(path, image)
            except BaseException:
                h.slot = self.model.page_in(image)     # back, as it was
                raise
        del self.held[key]
        self.paged[key] = (h.inc, h.delivered)
        return (image if path is None else None), len(image)

    @_entry
    def page_in(self, image: Any = None, path: str | None = None, request_id: Any = None,
                inc: str | None = None) -> str:
        """Brings a paged-out session back (from its image or its file, read
        once) into a free slot; returns its request id (str key). It is live
        again, as the incarnation it was paged out as. Checked before
        anything changes: the image (the library's checks), its request (one
        paged out here; ``request_id`` when given), the incarnation its
        header names, which must be the one paged out (IncarnationError for
        another incarnation's image, e.g. of a closed one, or one naming
        none) and ``inc`` when given."""
        if path is not None:
            with open(path, "rb") as f:
                image = f.read()
        key = self._image_key(image, None if request_id is None else request_key(request_id))
        if key not in self.paged:
            raise RingKVRuntimeError(f"host {self.name}: request {key!r} is not paged out here")
        p_inc, delivered = self.paged[key]
        self._same(key, p_inc, inc, "paged-out request")
        self._named(key, image, p_inc, "image")
        s = self.model.page_in(image)
        del self.paged[key]
        self.held[key] = _Held(s, p_inc, delivered=delivered)
        return key

    @_entry
    def discard(self, request_id: Any, inc: str | None = None) -> bool:
        """Gives a paged-out session's reservation up (its image is of no use
        here any more); returns whether there was one."""
        key = request_key(request_id)
        if key not in self.paged or (inc is not None and self.paged[key][0] != inc):
            return False
        self.model.offload_discard(model_id(key))
        del self.paged[key]
        return True


#: Why bytes naming no incarnation (a checkpoint, image or region metadata)
#: are refused: the one wording of recover, restore, page-in and import.
_NO_INCARNATION = (f"names no incarnation (metadata {INCARNATION_KEY!r}): written by the library "
                   "alone or before incarnations, it cannot say whose it is; refused")


def _checked_checkpoint(path: str, key: str, inc: str | None) -> tuple[bytes, str]:
    """The bytes and incarnation of checkpoint file ``path`` once it is valid
    (the library's checks), of request ``key`` and of incarnation ``inc``
    (any when None, but one it must name). RingKVValueError otherwise."""
    data, info, meta = read_checkpoint(path)
    if request_key(info.request_id_bytes) != key:
        raise RingKVValueError(f"checkpoint {path!r} is of request {info.request_id!r}, not "
                               f"{key!r}")
    file_inc = meta.get(INCARNATION_KEY)
    if file_inc is None:
        raise RingKVValueError(f"checkpoint {path!r} {_NO_INCARNATION}")
    if inc is not None and file_inc != inc:
        raise RingKVValueError(f"checkpoint {path!r} is of incarnation {file_inc} of "
                               f"{key!r}, not the current {inc}; refused")
    return data, file_inc


def _flip_last_byte(path: str) -> None:
    """Damages a file's last data byte in place (a fault, for tests)."""
    with open(path, "r+b") as f:
        f.seek(-1, os.SEEK_END)
        b = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([b[0] ^ 0x01]))


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
    characters. A longer one (quoting can triple an id of 255 bytes) is
    the first 96 characters of the quoted id (cut before a ``%XX``
    escape), ``%_``, the SHA-256 of the raw id (64 hex digits) and
    ``.safetensors``: 174 characters at most. Stable across processes and
    versions; two ids never share a name (quoting never writes ``%_``).
    Each incarnation of the id writes this one file (its metadata says
    which)."""
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
