"""The invariants of ringkv.ray under faults (issue 23, docs/migration.md
"Faults"), as one checker the Ray tests share: :class:`Checked` wraps a
SessionRouter, records what every call delivered and reported, checks each
result as it comes, and :meth:`Checked.check` checks the whole state.

(a) each session's frames (per request id and incarnation) are delivered
    at most once and in order, each with the digest of a never-failed run
    of that frame, and every frame below the last one delivered or
    reported lost is one or the other, never both;
(b) no closed incarnation's state reappears: no result, held session,
    paged-out or parked record, reservation or checkpoint file names one;
(c) an id is live on at most one host (checked after every call), and the
    router's placement is what the hosts hold;
(d) no reserved slot, frozen copy or checkpoint temporary file is left
    once the router retried what it left (``release_stale``); no Ray
    process is left (ray_cluster.stop_cluster, at the end of the session);
(e) every session live on a host (recovered or not) has the session digest
    of a never-failed run at its clock.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import ringkv
from ringkv.ray.checkpoint import INCARNATION_KEY, TEMP_PREFIX, read_checkpoint
from ringkv.ray.host import model_id, request_key
from ringkv.ray.stream import step_frame



def temp_files(folder: str) -> list[str]:
    """Temporary files of unfinished saves in ``folder``: ringkv.ray's
    (TEMP_PREFIX) and the library's (``*.tmp-XXXXXX``,
    ``.ringkv.tmp-XXXXXX``); none may be left once a save returned."""
    return sorted(n for n in os.listdir(folder)
                  if n.startswith(TEMP_PREFIX) or n.startswith(".ringkv.tmp-") or
                  ".safetensors.tmp-" in n)

class Reference:
    """A session that never failed, per request key, stepped on demand in a
    one-session model of the config's geometry: the digest of each frame's
    attention outputs and the session digest after it."""

    def __init__(self, config: ringkv.ModelConfig):
        self.cfg = ringkv.ModelConfig(**{**config.__dict__, "num_sessions": 1})
        self.runs: dict[str, tuple[Any, int, list]] = {}
        self.empty: int | None = None

    def _run(self, key: str, frame: int) -> list[tuple[int, int]]:
        if key not in self.runs:
            m = ringkv.Model(self.cfg)
            s = m.claim(model_id(key))
            if self.empty is None:
                self.empty = m.session_digest(s)
            self.runs[key] = (m, s, [])
        m, s, states = self.runs[key]
        while len(states) <= frame:
            f = len(states)
            d = step_frame(m, [s], [key], [f])[0]
            states.append((d, m.session_digest(s)))
        return states

    def output(self, key: str, frame: int) -> int:
        return self._run(key, frame)[frame][0]

    def session(self, key: str, clock: int | None) -> int:
        if clock is None:
            self._run(key, 0)
            return self.empty
        return self._run(key, clock)[clock][1]


@dataclass
class _Log:
    delivered: list[int] = field(default_factory=list)
    lost: set[int] = field(default_factory=set)


class Checked:
    """A SessionRouter (``router``, over ``hosts``: name -> actor handle)
    whose calls are recorded and checked; other attributes pass through.
    ``checkpoint_dir``: the hosts' folder (files and temporary files are
    checked)."""

    def __init__(self, router: Any, hosts: dict[str, Any], config: ringkv.ModelConfig,
                 checkpoint_dir: str | None):
        self.router, self.handles, self.dir = router, dict(hosts), checkpoint_dir
        self.ref = Reference(config)
        self.logs: dict[tuple[str, str], _Log] = {}
        self.closed: set[tuple[str, str]] = set()
        self.recoveries: list[Any] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.router, name)

    # ---- recorded calls -------------------------------------------------
    def open(self, rid: Any) -> str:
        host = self._recorded(lambda: self.router.open(rid))
        self.logs.setdefault((request_key(rid), self.router.incarnation(rid)), _Log())
        self.live_once()
        return host

    def close(self, rid: Any) -> None:
        inc = self.router.incarnations.get(rid)
        self._recorded(lambda: self.router.close(rid))
        self.closed.add((request_key(rid), inc))
        self.live_once()

    def step(self, rids: Any = None) -> Any:
        rep = self._recorded(lambda: self.router.step(rids))
        self.live_once()
        return rep

    def migrate(self, rid: Any, host: str) -> Any:
        mig = self._recorded(lambda: self.router.migrate(rid, host))
        self._recovered(mig.recovered)
        self.live_once()
        return mig

    def offload(self, rid: Any) -> int:
        n = self._recorded(lambda: self.router.offload(rid))
        self.live_once()
        return n

    def page_in(self, rid: Any) -> str:
        host = self._recorded(lambda: self.router.page_in(rid))
        self.live_once()
        return host

    def restore_waiting(self) -> dict:
        out = self._recorded(lambda: self.router.restore_waiting())
        self._recovered(out)
        self.live_once()
        return out

    def _recorded(self, call: Any) -> Any:
        n = len(self.recoveries)
        try:
            out = call()
        except Exception as exc:
            if getattr(exc, "step_report", None) is not None:
                self._report(exc.step_report)
            self._recovered(getattr(exc, "recovered", None) or {})
            self.live_once()
            self.states({request_key(r.request_id) for r in self.recoveries[n:]})
            raise
        if hasattr(out, "results"):
            self._report(out)
        self.states({request_key(r.request_id) for r in self.recoveries[n:]})
        return out

    # ---- what a call said -----------------------------------------------------
    def _incs(self) -> dict[str, str]:
        return {request_key(r): inc for r, inc in self.router.incarnations.items()}

    def _recovered(self, recovered: dict) -> None:
        for rid, rec in recovered.items():
            key = request_key(rid)
            assert (key, rec.incarnation) not in self.closed, f"closed {rid!r} came back"
            assert rec.digest_ok is not False, f"{rid!r}: the replay's digest differs: {rec}"
            log = self.logs.setdefault((key, rec.incarnation), _Log())
            last = log.delivered[-1] if log.delivered else -1
            assert all(f > last for f in rec.lost_frames), (rid, rec, last)
            assert not rec.replayed or rec.replayed[-1] == last, (rid, rec, last)
            log.lost |= set(rec.lost_frames)
            self.recoveries.append(rec)

    def _report(self, rep: Any) -> None:
        self._recovered(rep.recovered)
        incs = self._incs() if rep.lost else {}
        for rid, frames in rep.lost.items():
            key = request_key(rid)
            log = self.logs.setdefault((key, incs[key]), _Log())
            last = log.delivered[-1] if log.delivered else -1
            assert all(f > last for f in frames), (rid, frames, last)
            log.lost |= set(frames)
        for rid, r in rep.results.items():
            key = request_key(rid)
            assert (key, r["inc"]) not in self.closed, f"closed {rid!r} delivered a frame"
            log = self.logs.setdefault((key, r["inc"]), _Log())
            f = r["frame"]
            assert not log.delivered or f > log.delivered[-1], \
                f"{rid!r}: frame {f} after {log.delivered[-1]}: delivered twice or out of order"
            assert f not in log.lost, f"{rid!r}: frame {f} was reported lost, then delivered"
            assert r["digest"] == self.ref.output(key, f), f"{rid!r}: frame {f}'s digest"
            log.delivered.append(f)

    # ---- the invariants -----------------------------------------------------------
    def live_once(self) -> None:
        """(c): each id live on at most one host, and held where the router
        places it (live, or frozen there until the router's retry thaws it:
        a thaw that failed; check() then requires none frozen)."""
        seen: dict[str, str] = {}
        held: dict[str, set[str]] = {}
        for host, inv in self.router.inventory().items():
            for key, v in inv["held"].items():
                held.setdefault(key, set()).add(host)
                if v["frozen"]:
                    continue
                assert key not in seen, f"{key!r} is live on {seen[key]} and {host}"
                seen[key] = host
        where = {request_key(r): h for r, h in self.router.where.items()}
        for key, host in where.items():
            assert seen.get(key, host) == host and host in held.get(key, ()), \
                f"{key!r}: placed on {host}; live on {seen.get(key)}, held on {held.get(key)}"

    def check(self) -> None:
        """Every invariant, (a) to (e), on the state as it is now."""
        self.router.release_stale()
        self.live_once()
        for (key, inc), log in self.logs.items():                      # (a)
            d = set(log.delivered)
            assert not d & log.lost, f"{key!r}/{inc}: delivered and lost: {d & log.lost}"
            top = max(d | log.lost, default=-1)
            missing = set(range(top + 1)) - d - log.lost
            assert not missing, f"{key!r}/{inc}: frames neither delivered nor lost: {missing}"
        invs = self.router.inventory()
        for host, inv in invs.items():
            for part in ("held", "incoming", "paged", "parked"):          # (b)
                for key, v in inv[part].items():
                    assert (key, v["inc"]) not in self.closed, \
                        f"closed {key!r}/{v['inc']} is {part} on {host}"
            assert not inv["incoming"], f"{host}: slots left reserved: {inv['incoming']}"   # (d)
            frozen = [k for k, v in inv["held"].items() if v["frozen"]]
            assert not frozen, f"{host}: frozen copies left: {frozen}"
        if self.dir and os.path.isdir(self.dir):
            assert not temp_files(self.dir), f"temporary files left: {temp_files(self.dir)}"
            closed = {k for k, _ in self.closed}
            for name in os.listdir(self.dir):
                if not name.endswith(".safetensors"):
                    continue
                try:
                    _, info, meta = read_checkpoint(os.path.join(self.dir, name))
                except (OSError, ValueError):
                    continue       # a damaged file (a fault) is refused by every restore
                key = request_key(info.request_id_bytes)
                if key in closed:
                    assert (key, meta.get(INCARNATION_KEY)) not in self.closed, \
                        f"the checkpoint of closed {key!r}/{meta.get(INCARNATION_KEY)} is left"
        self.states({k for k, _ in self.logs}, invs)

    def states(self, keys: set[str], invs: dict | None = None) -> None:
        """(e) for ``keys``: each one held on a host has the session digest
        of a never-failed run at its clock (a recovered one: at the frame
        it resumed at, or later if it stepped since)."""
        import ray
        if not keys:
            return
        invs = self.router.inventory() if invs is None else invs
        for host, inv in invs.items():
            h = self.handles[host]
            for key, v in inv["held"].items():
                if key in keys:
                    got = ray.get(h.session_digest.remote(key))
                    assert got == self.ref.session(key, v["clock"]), \
                        f"{key!r} on {host} at clock {v['clock']}: not a never-failed run's state"
