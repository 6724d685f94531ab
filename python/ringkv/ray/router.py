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
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Iterable

import ray
from ray.exceptions import RayActorError

from .host import checkpoint_path

__all__ = ["SessionRouter", "MigrationError", "Recovery", "StepReport", "Migration"]

_DEAD = (RayActorError,)


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
    (``results``), and the sessions of hosts that died (``recovered``)."""
    results: dict[str, dict] = field(default_factory=dict)
    recovered: dict[str, Recovery] = field(default_factory=dict)


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

    # ---- placement -------------------------------------------------------------
    def alive(self) -> list[str]:
        return [n for n in self.hosts if n not in self.dead]

    def load(self, host: str) -> int:
        """Slots the router has given out on ``host``."""
        return sum(1 for h in self.where.values() if h == host)

    def _least_loaded(self, exclude: Iterable[str] = ()) -> str:
        room = [n for n in self.alive() if n not in set(exclude)
                and self.load(n) < self.capacity[n]]
        if not room:
            raise RuntimeError("no alive host has a free session slot")
        return min(room, key=lambda n: (self.load(n), n))

    def open(self, request_id: str) -> str:
        """Places a new request on the least-loaded host (a placed one stays
        where it is: affinity) and returns the host's name."""
        if request_id in self.where:
            return self.where[request_id]
        host = self._least_loaded()
        ray.get(self.hosts[host].open.remote(request_id))
        self.where[request_id] = host
        return host

    def close(self, request_id: str) -> None:
        host = self.where.pop(request_id)
        ray.get(self.hosts[host].close.remote(request_id))
        self.last_frame.pop(request_id, None)

    # ---- frames ----------------------------------------------------------------------
    def step(self, request_ids: Iterable[str] | None = None) -> StepReport:
        """One frame of each request (default: every placed one), each host
        stepping its own as one batch, all hosts at once. A host found dead
        is recovered (:meth:`host_died`); its sessions are not stepped this
        time."""
        rids = list(self.where) if request_ids is None else list(request_ids)
        by_host: dict[str, list[str]] = {}
        for rid in rids:
            by_host.setdefault(self.where[rid], []).append(rid)
        calls = {h: self.hosts[h].step.remote(r) for h, r in by_host.items()}
        report = StepReport()
        for host, ref in calls.items():
            try:
                got = ray.get(ref)
            except _DEAD:
                report.recovered.update(self.host_died(host))
                continue
            for rid, r in got.items():
                self.last_frame[rid] = r["frame"]
                if r["checkpoint"] is not None:
                    self.last_checkpoint[rid] = r["checkpoint"]
            report.results.update(got)
        return report

    # ---- failures -------------------------------------------------------------------
    def host_died(self, host: str) -> dict[str, Recovery]:
        """Marks ``host`` dead and restores each of its sessions on the
        least-loaded alive host: from its last checkpoint when there is one,
        else empty; the frames completed after that are reported lost."""
        self.dead.add(host)
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
        import fails."""
        src_name, dst_name = self.where[request_id], host
        if dst_name in self.dead or dst_name not in self.hosts:
            raise MigrationError(request_id, "reserve", src_name, dst_name,
                                 RuntimeError(f"host {dst_name} is not alive"))
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
        host = self.where[request_id]
        ref = self.hosts[host].offload.remote(request_id)
        image = ray.get(ref)
        del self.where[request_id]
        self.paged_out[request_id] = (host, ref)
        return len(image)

    def page_in(self, request_id: str) -> str:
        """Brings a paged-out session back on the host that paged it out (its
        request id is reserved there); returns the host."""
        host, ref = self.paged_out[request_id]
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
