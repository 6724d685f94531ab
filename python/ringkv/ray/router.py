"""``SessionRouter``: places request ids on :class:`~ringkv.ray.SessionHost`
actors, steps them, moves them between hosts and brings back the sessions
of a host that died (docs/migration.md).

- **Placement**: a new request goes to the alive host with the fewest
  sessions (and a free slot); a placed request stays there (affinity)
  until it is moved.
- **Migration** (:meth:`migrate`), between two frames: the destination
  reserves a slot from the session's metadata (no room: refused before the
  source gives anything up); the source freezes the session and its
  regions travel through Ray's object store; the destination copies them
  into its slot and verifies (digest of the regions against the source's,
  and the import checks); it imports the session (now live there); the
  source releases its frozen copy. A failure before the import leaves the
  session live and unchanged at the source (the destination's slot is
  cancelled); a session is live on one host at a time (a frozen copy is
  never stepped).
- **Checkpoints**: hosts save each session every N frames; when a host
  dies, its sessions are restored on the others from their last checkpoint
  and the frames after it are reported lost, by number (:meth:`step`
  returns them; the next steps recompute them).

Written for Ray actor handles (``ray.remote(SessionHost)``); the router
itself is a plain object (use it in the driver, or wrap it with
``ray.remote`` as a controller actor).

Names are checked before anything is asked of a host, with the binding's
classes (python/README.md, Errors): a request id the router does not know,
or a host name it was never given, is :class:`ringkv.RingKVKeyError` (a
KeyError) naming the ones it knows; a request in the wrong place for the
call (paged out, waiting for room after its host died, not paged out), a
dead host, or no alive host with room is :class:`ringkv.RingKVRuntimeError`
(a RuntimeError) saying which. :meth:`SessionRouter.migrate` to a dead
host stays a :class:`MigrationError` (step ``reserve``).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Iterable

import ray
from ray.exceptions import RayActorError

from ..errors import RingKVKeyError, RingKVRuntimeError, python_calls
from .host import checkpoint_path

__all__ = ["SessionRouter", "MigrationError", "Recovery", "StepReport", "Migration"]

_DEAD = (RayActorError,)


def _names(names: Iterable[str], limit: int = 16) -> str:
    """``a, b, c`` (sorted; the first ``limit`` and a count when longer);
    ``none`` when empty."""
    names = sorted(names)
    if not names:
        return "none"
    more = f", ... ({len(names)} in all)" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


class MigrationError(RuntimeError):
    """A migration that did not happen: ``step`` names where it failed
    (``meta``, ``reserve``, ``export``, ``fill``, ``commit``), ``cause`` is
    the error. The session is live and unchanged where it was (``source``),
    unless the source itself died (then :class:`Recovery` says where it
    went)."""

    def __init__(self, request_id: str, step: str, source: str, destination: str,
                 cause: BaseException):
        super().__init__(f"migrating {request_id!r} from {source} to {destination} failed at "
                         f"{step}: {type(cause).__name__}: {cause}")
        self.request_id, self.step, self.source = request_id, step, source
        self.destination, self.cause = destination, cause
        #: sessions of a host that died during the migration, restored
        #: elsewhere (request -> Recovery)
        self.recovered: dict = {}


@dataclass
class Recovery:
    """Where a session of a dead host went: ``host``, the checkpoint frame it
    resumed from (``resumed_from``: None when there was no checkpoint, it
    restarted empty) and the frames it had completed after that, now lost
    (``lost_frames``; the next steps recompute them). ``host`` None: no
    alive host had room; it waits in ``SessionRouter.waiting`` (restored by
    :meth:`SessionRouter.restore_waiting` once there is room)."""
    request_id: str
    dead_host: str
    host: str
    resumed_from: int | None
    lost_frames: list[int]


@dataclass
class StepReport:
    """What one :meth:`SessionRouter.step` did: per request the frame, the
    digest of its attention outputs and the checkpoint saved after it
    (``results``), the sessions of hosts that died (``recovered``), and the
    checkpoints due after this frame that could not be saved (request ->
    why; ``checkpoint_errors``)."""
    results: dict[str, dict] = field(default_factory=dict)
    recovered: dict[str, Recovery] = field(default_factory=dict)
    checkpoint_errors: dict[str, str] = field(default_factory=dict)


@dataclass
class Migration:
    """A migration done: ``bytes`` moved through the object store, the
    ``pause_s`` the session was not steppable (export to import), its
    ``clock``, and whether the source's frozen copy was released
    (``released``; if not, :meth:`SessionRouter.release_stale` retries, or
    the source died: its other sessions are in ``recovered``)."""
    request_id: str
    source: str
    destination: str
    bytes: int
    pause_s: float
    clock: int | None
    released: bool
    recovered: dict = field(default_factory=dict)


@python_calls("SessionRouter")
class SessionRouter:
    """Routes request ids over ``hosts`` (name -> SessionHost actor handle).
    ``checkpoint_dir`` is the hosts' checkpoint folder (for recovery)."""

    def __init__(self, hosts: dict[str, Any], checkpoint_dir: str | None = None):
        self.hosts = dict(hosts)
        self.checkpoint_dir = checkpoint_dir
        self.dead: set[str] = set()
        self.where: dict[str, str] = {}             # request -> host (live there)
        self.last_frame: dict[str, int] = {}        # last frame completed
        self.last_checkpoint: dict[str, int] = {}   # last frame checkpointed
        self.paged_out: dict[str, tuple[str, Any]] = {}  # request -> (host, image ref)
        self.stale: dict[str, str] = {}             # request -> host holding a frozen copy
        self.waiting: dict[str, str] = {}           # request -> its dead host, not yet restored
        loads = ray.get([h.load.remote() for h in self.hosts.values()])
        self.capacity = {n: l["capacity"] for n, l in zip(self.hosts, loads)}

    # ---- names ------------------------------------------------------------------
    def _host(self, host: str) -> str:
        """``host`` if the router was given a host of that name (alive or
        dead); RingKVKeyError naming the hosts otherwise."""
        if host not in self.hosts:
            raise RingKVKeyError(f"no host named {host!r}; hosts: {_names(self.hosts)}")
        return host

    def _elsewhere(self, request_id: str) -> str | None:
        """Why a request the router knows is not live on a host, or None."""
        if request_id in self.paged_out:
            return (f"request {request_id!r} is paged out (of host "
                    f"{self.paged_out[request_id][0]}); SessionRouter.page_in brings it back")
        if request_id in self.waiting:
            return (f"request {request_id!r} is waiting for room since its host "
                    f"{self.waiting[request_id]} died; SessionRouter.restore_waiting "
                    "brings it back")
        return None

    def _placed(self, request_id: str) -> str:
        """The host where ``request_id`` is live. RingKVRuntimeError when it
        is paged out or waiting; RingKVKeyError naming the live ones when
        the router does not know it."""
        host = self.where.get(request_id)
        if host is not None:
            return host
        why = self._elsewhere(request_id)
        if why is not None:
            raise RingKVRuntimeError(why)
        also = "".join(f"; {what}: {_names(ids)}" for what, ids in
                       (("paged out", self.paged_out), ("waiting", self.waiting)) if ids)
        raise RingKVKeyError(f"no session with request id {request_id!r}; known: "
                             f"{_names(self.where)}{also}")

    # ---- placement -------------------------------------------------------------
    def alive(self) -> list[str]:
        return [n for n in self.hosts if n not in self.dead]

    def load(self, host: str) -> int:
        """Slots the router has given out on ``host`` (RingKVKeyError for a
        host it was never given)."""
        self._host(host)
        return sum(1 for h in self.where.values() if h == host)

    def _least_loaded(self, exclude: Iterable[str] = ()) -> str:
        """The alive host with the fewest sessions and a free slot;
        RingKVRuntimeError (a RuntimeError) saying why there is none."""
        alive = [n for n in self.alive() if n not in set(exclude)]
        room = [n for n in alive if self.load(n) < self.capacity[n]]
        if not room:
            if not alive:
                raise RingKVRuntimeError(f"no alive host: every host died "
                                         f"({_names(self.dead)})")
            full = ", ".join(f"{n} {self.load(n)}/{self.capacity[n]}" for n in sorted(alive))
            raise RingKVRuntimeError(f"no alive host has a free session slot ({full})")
        return min(room, key=lambda n: (self.load(n), n))

    def open(self, request_id: str) -> str:
        """Places a new request on the least-loaded host (a placed one stays
        where it is: affinity) and returns the host's name. RingKVRuntimeError
        for a request paged out or waiting (bring it back instead), or when
        no alive host has room."""
        if request_id in self.where:
            return self.where[request_id]
        why = self._elsewhere(request_id)
        if why is not None:
            raise RingKVRuntimeError(why)
        host = self._least_loaded()
        ray.get(self.hosts[host].open.remote(request_id))
        self.where[request_id] = host
        return host

    def close(self, request_id: str) -> None:
        host = self._placed(request_id)
        del self.where[request_id]
        ray.get(self.hosts[host].close.remote(request_id))
        self.last_frame.pop(request_id, None)

    # ---- frames ----------------------------------------------------------------------
    def step(self, request_ids: Iterable[str] | None = None) -> StepReport:
        """One frame of each request (default: every placed one), each host
        stepping its own as one batch, all hosts at once. A host found dead
        is recovered (:meth:`host_died`); its sessions are not stepped this
        time. Every request is checked (:meth:`_placed`) before any host
        steps. A host that raises (not dead) does not stop the others: the
        results of every other host are recorded first (``last_frame``,
        ``last_checkpoint``), then the first such error is raised with the
        report as its ``step_report``. A checkpoint a host could not save
        is not an error of the step: it is in the report's
        ``checkpoint_errors`` (``last_checkpoint`` keeps the frame of the
        last file saved)."""
        rids = list(self.where) if request_ids is None else list(request_ids)
        by_host: dict[str, list[str]] = {}
        for rid in rids:
            by_host.setdefault(self._placed(rid), []).append(rid)
        calls = {h: self.hosts[h].step.remote(r) for h, r in by_host.items()}
        report = StepReport()
        failed: dict[str, BaseException] = {}
        stepped: list[str] = []  # hosts whose results are in
        for host, ref in calls.items():
            try:
                got = ray.get(ref)
            except _DEAD:
                report.recovered.update(self.host_died(host))
                continue
            except Exception as exc:  # noqa: BLE001 - raised after every host's results are in
                failed[host] = exc
                continue
            for rid, r in got.items():
                self.last_frame[rid] = r["frame"]
                if r["checkpoint"] is not None:
                    self.last_checkpoint[rid] = r["checkpoint"]
                if r.get("checkpoint_error") is not None:
                    report.checkpoint_errors[rid] = r["checkpoint_error"]
            report.results.update(got)
            stepped.append(host)
        if failed:
            exc = next(iter(failed.values()))
            note = (f"SessionRouter.step: host(s) {_names(failed)} raised; the results of "
                    f"the other hosts ({_names(stepped)}) are recorded, in "
                    "last_frame/last_checkpoint and in this exception's step_report")
            if hasattr(exc, "add_note"):  # Python >= 3.11
                exc.add_note(note)
            exc.step_report = report  # type: ignore[attr-defined]
            raise exc
        return report

    # ---- failures -------------------------------------------------------------------
    def host_died(self, host: str) -> dict[str, Recovery]:
        """Marks ``host`` dead and restores each of its sessions on the
        least-loaded alive host: from its last checkpoint when there is one,
        else empty; the frames completed after that are reported lost.
        RingKVKeyError for a host the router was never given."""
        self.dead.add(self._host(host))
        out = {}
        for rid in [r for r, h in self.where.items() if h == host]:
            del self.where[rid]
            try:
                target = self._least_loaded()
            except RuntimeError:  # no room anywhere: it waits (host None)
                last = self.last_frame.get(rid, -1)
                ckpt = self.last_checkpoint.get(rid)
                self.waiting[rid] = host
                out[rid] = Recovery(rid, host, None, ckpt,
                                    list(range((-1 if ckpt is None else ckpt) + 1, last + 1)))
                continue
            out.update(self._restore_one(rid, host, target))
        return out

    def _restore_one(self, rid: str, dead_host: str, target: str | None = None
                     ) -> dict[str, Recovery]:
        """Restores request ``rid`` (placed on ``dead_host``) on ``target``
        (default: the least-loaded alive host) from its last checkpoint."""
        target = target or self._least_loaded()
        ckpt = self.last_checkpoint.get(rid)
        path = checkpoint_path(self.checkpoint_dir, rid) if self.checkpoint_dir else None
        if ckpt is not None and path and os.path.exists(path):
            clock = ray.get(self.hosts[target].restore.remote(rid, path))
        else:
            ray.get(self.hosts[target].open.remote(rid))
            clock = None
        last = self.last_frame.get(rid, -1)
        start = -1 if clock is None else clock
        self.where[rid] = target
        if clock is None:
            self.last_frame.pop(rid, None)
        else:
            self.last_frame[rid] = clock
        return {rid: Recovery(rid, dead_host, target, clock, list(range(start + 1, last + 1)))}

    def restore_waiting(self) -> dict[str, Recovery]:
        """Restores the sessions of dead hosts that found no room before."""
        out = {}
        for rid, dead_host in list(self.waiting.items()):
            try:
                self._least_loaded()
            except RuntimeError:
                break
            del self.waiting[rid]
            out.update(self._restore_one(rid, dead_host))
        return out

    def release_stale(self) -> dict[str, str]:
        """Retries releasing frozen copies left by migrations whose last step
        failed; returns those still left (request -> host)."""
        for rid, host in list(self.stale.items()):
            if host in self.dead:
                del self.stale[rid]
                continue
            try:
                ray.get(self.hosts[host].release.remote(rid))
                del self.stale[rid]
            except Exception:  # noqa: BLE001 - kept for the next try
                pass
        return dict(self.stale)

    # ---- migration --------------------------------------------------------------------
    def migrate(self, request_id: str, host: str) -> Migration:
        """Moves a session to ``host`` between two frames (the module's
        docstring has the protocol). Raises MigrationError, with the
        session live and unchanged at its source, when any step before the
        import fails; before anything is asked of a host, RingKVKeyError for
        an unknown request id or host name (RingKVRuntimeError for a request
        paged out or waiting)."""
        src_name, dst_name = self._placed(request_id), self._host(host)
        if dst_name in self.dead:
            raise MigrationError(request_id, "reserve", src_name, dst_name,
                                 RuntimeError(f"host {dst_name} is not alive (alive: "
                                              f"{_names(self.alive())})"))
        if src_name == dst_name:
            return Migration(request_id, src_name, dst_name, 0, 0.0,
                             ray.get(self.hosts[src_name].clock.remote(request_id)), True)
        src, dst = self.hosts[src_name], self.hosts[dst_name]
        step, filled, reserved, exported, meta2 = "meta", False, False, False, None
        t0 = time.perf_counter()
        try:
            meta = ray.get(src.meta.remote(request_id))
            step = "reserve"
            ray.get(dst.reserve.remote(meta))
            reserved = True
            step, exported = "export", True
            meta_ref, digest_ref, data_ref = src.export.options(num_returns=3).remote(request_id)
            meta2, digest = ray.get([meta_ref, digest_ref])
            step = "fill"
            moved = ray.get(dst.fill.remote(request_id, data_ref, digest))
            filled = True
            del data_ref
            step = "commit"
            clock = ray.get(dst.commit.remote(request_id, meta2))
        except BaseException as exc:  # roll back, then say where it failed
            recovered = self._roll_back(request_id, src_name, dst_name, reserved, exported,
                                        meta2 if filled else None)
            err = MigrationError(request_id, step, src_name, dst_name, exc)
            err.recovered = recovered
            raise err from exc
        pause = time.perf_counter() - t0
        self.where[request_id] = dst_name
        released, recovered = True, {}
        try:
            ray.get(src.release.remote(request_id))
        except _DEAD:
            recovered = self.host_died(src_name)
            released = False
        except Exception:  # noqa: BLE001 - a frozen copy is never stepped; retried later
            self.stale[request_id] = src_name
            released = False
        return Migration(request_id, src_name, dst_name, int(moved), pause, clock, released,
                         recovered)

    def _roll_back(self, rid: str, src_name: str, dst_name: str, reserved: bool,
                   exported: bool, verified_meta: bytes | None) -> dict[str, Recovery]:
        """Undo a migration that failed: the destination's slot cancelled, the
        source thawed (it may have frozen the session before failing). If
        the source died and the destination holds a verified copy
        (``verified_meta``: the fill passed), that copy is imported instead:
        nothing is lost."""
        src, dst = self.hosts[src_name], self.hosts[dst_name]
        src_dead = False
        try:
            ray.get(src.thaw.remote(rid) if exported else src.ping.remote())
        except _DEAD:
            src_dead = True
        except Exception:  # noqa: BLE001 - it was not frozen there: nothing to thaw
            pass
        recovered: dict[str, Recovery] = {}
        if src_dead and verified_meta is not None:
            try:
                ray.get(dst.commit.remote(rid, verified_meta))
                self.where[rid] = dst_name
                recovered.update(self.host_died(src_name))
                return recovered
            except Exception:  # noqa: BLE001 - then from its checkpoint, below
                pass
        if reserved:
            try:
                ray.get(dst.cancel.remote(rid))
            except _DEAD:
                recovered.update(self.host_died(dst_name))
        if src_dead:
            recovered.update(self.host_died(src_name))
        return recovered

    # ---- offload ----------------------------------------------------------------------
    def offload(self, request_id: str) -> int:
        """Pages a session out of its host: the image goes into Ray's object
        store (the router keeps the reference), the slot is free; returns
        the image's size in bytes."""
        host = self._placed(request_id)
        ref = self.hosts[host].offload.remote(request_id)
        image = ray.get(ref)
        del self.where[request_id]
        self.paged_out[request_id] = (host, ref)
        return len(image)

    def page_in(self, request_id: str) -> str:
        """Brings a paged-out session back on the host that paged it out (its
        request id is reserved there); returns the host. RingKVRuntimeError
        for a request that is not paged out, or whose host died;
        RingKVKeyError for one the router does not know."""
        if request_id not in self.paged_out:
            if request_id in self.where:
                raise RingKVRuntimeError(f"request {request_id!r} is not paged out: it is live "
                                         f"on host {self.where[request_id]}")
            why = self._elsewhere(request_id)
            if why is not None:
                raise RingKVRuntimeError(why)
            raise RingKVKeyError(f"no paged-out session with request id {request_id!r}; "
                                 f"paged out: {_names(self.paged_out)}")
        host, ref = self.paged_out[request_id]
        if host in self.dead:
            raise RingKVRuntimeError(f"request {request_id!r} was paged out of host {host}, "
                                     "which is not alive")
        got = ray.get(self.hosts[host].page_in.remote(ref))
        if got != request_id:
            raise RuntimeError(f"paging {request_id!r} in brought back {got!r}")
        del self.paged_out[request_id]
        self.where[request_id] = host
        return host

    # ---- views -------------------------------------------------------------------------
    def live(self) -> dict[str, dict[str, int | None]]:
        """Each alive host's live sessions and clocks (as the hosts see it)."""
        names = self.alive()
        got = ray.get([self.hosts[n].live.remote() for n in names])
        return dict(zip(names, got))
