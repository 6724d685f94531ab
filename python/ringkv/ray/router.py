"""``SessionRouter``: places request ids on :class:`~ringkv.ray.SessionHost`
actors, steps them, moves them between hosts and brings back the sessions
of a host that died; one :class:`RouterCore` actor per (namespace, name)
owns the placement (rebuilt from the hosts' inventories when it starts).
docs/migration.md ("Faults") states the guarantees: incarnations, delivered
and lost frames, recoveries, :class:`HostError`. Names are checked before
anything is asked of a host; python/README.md ("Errors") lists the errors
of an unknown name or a call in the wrong place.
"""
from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field
from typing import Any, Iterable

import ray
from ray.exceptions import ActorDiedError, GetTimeoutError, RayActorError, RayError

from ..errors import RingKVKeyError, RingKVRuntimeError, python_call, python_calls
from .host import StaleHostError, new_incarnation, request_key

__all__ = ["SessionRouter", "RouterCore", "MigrationError", "HostError", "RouterRestartedError",
           "Recovery", "StepReport", "Migration"]


def _show(rid: Any) -> str:
    return rid if isinstance(rid, str) else repr(rid)


def _names(names: Iterable[Any], limit: int = 16) -> str:
    """``a, b, c`` (sorted; the first ``limit`` and a count when longer);
    ``none`` when empty. Bytes ids are shown as their repr."""
    names = sorted(_show(n) for n in names)
    if not names:
        return "none"
    more = f", ... ({len(names)} in all)" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


class HostError(RingKVRuntimeError):
    """A host call that failed: ``host``, ``call`` (the host method),
    ``request_id`` (None for a call about no request) and ``cause`` (the
    host's exception, or Ray's). ``recovered``: sessions of hosts found dead
    meanwhile, restored elsewhere (request -> :class:`Recovery`)."""

    def __init__(self, message: str, host: str | None = None, call: str | None = None,
                 request_id: Any = None, cause: BaseException | None = None):
        super().__init__(message)
        self.host, self.call, self.request_id, self.cause = host, call, request_id, cause
        self.recovered: dict = {}


def _host_error(host: str, call: str, request_id: Any, cause: BaseException,
                what: str = "") -> HostError:
    rq = "" if request_id is None else f", request {_show(request_id)!r}"
    return HostError(f"host {host} ({call}{rq}){what}: {type(cause).__name__}: {cause}", host,
                     call, request_id, cause)


class RouterRestartedError(RingKVRuntimeError):
    """The router actor died during the call: its effect is unknown. The
    router was restarted (or created anew) and rebuilt its placement from
    the hosts; call again (frames computed and never delivered are then
    reported in ``StepReport.lost``)."""


class MigrationError(RingKVRuntimeError):
    """A migration that did not happen: ``step`` names where it failed
    (``meta``, ``reserve``, ``export``, ``fill``, ``commit``), ``cause`` is
    the error. The session is live and unchanged where it was (``source``)
    unless the source itself died; ``recovered``: sessions of a host that
    died meanwhile, restored elsewhere (request -> :class:`Recovery`)."""

    def __init__(self, message: str, request_id: Any = None, step: str | None = None,
                 source: str | None = None, destination: str | None = None,
                 cause: BaseException | None = None):
        super().__init__(message)
        self.request_id, self.step, self.source = request_id, step, source
        self.destination, self.cause = destination, cause
        self.recovered: dict = {}


def _migration_error(rid: Any, step: str, src: str, dst: str, cause: BaseException
                     ) -> MigrationError:
    return MigrationError(f"migrating {_show(rid)!r} from {src} to {dst} failed at {step}: "
                          f"{type(cause).__name__}: {cause}", rid, step, src, dst, cause)


@dataclass
class Recovery:
    """Where a session went when its host died (or its page-out image was
    gone): ``host`` (None: no alive host had room; it waits in
    ``SessionRouter.waiting`` until :meth:`SessionRouter.restore_waiting`),
    ``resumed_from`` (the frame of the state loaded: its checkpoint's or
    image's; None: none was usable, it started empty), ``replayed`` (frames
    recomputed after that state up to the last delivered frame: not
    delivered again), ``lost_frames`` (frames after the last delivered one
    that will not be delivered: inside a checkpoint newer than it),
    ``source`` (``checkpoint``, ``image`` or ``empty``), ``refused`` (why a
    checkpoint file was not used: damaged, another incarnation's, none
    named), ``incarnation``, ``digest_ok`` (the replayed last delivered
    frame's digest equals the delivered one; None: nothing compared) and
    ``error`` (why it waits, when a host refused it)."""
    request_id: Any
    dead_host: str
    host: str | None
    resumed_from: int | None
    lost_frames: list[int]
    replayed: list[int] = field(default_factory=list)
    source: str = "empty"
    refused: str | None = None
    incarnation: str = ""
    digest_ok: bool | None = None
    error: str | None = None


@dataclass
class StepReport:
    """What one :meth:`SessionRouter.step` did: per request the frame, the
    digest of its attention outputs, its incarnation and the checkpoint
    saved after it (``results``: these frames are delivered); the sessions
    of hosts that died, in this call or in an earlier call that had no
    report to say it (``recovered``); the frames that will not be
    delivered, found outside a recovery (``lost``: request -> frames, e.g.
    computed by a host whose reply never came); and the checkpoints due
    after this frame that could not be saved (request -> why;
    ``checkpoint_errors``)."""
    results: dict[Any, dict] = field(default_factory=dict)
    recovered: dict[Any, Recovery] = field(default_factory=dict)
    checkpoint_errors: dict[Any, str] = field(default_factory=dict)
    lost: dict[Any, list[int]] = field(default_factory=dict)


@dataclass
class Migration:
    """A migration done: ``bytes`` moved through the object store, the
    ``pause_s`` the session was not steppable (export to import), its
    ``clock``, and whether the source's frozen copy was released
    (``released``; if not, :meth:`SessionRouter.release_stale` retries, or
    the source died: its other sessions are in ``recovered``)."""
    request_id: Any
    source: str
    destination: str
    bytes: int
    pause_s: float
    clock: int | None
    released: bool
    recovered: dict = field(default_factory=dict)


@dataclass
class _Session:
    """The router's record of one request (one incarnation)."""
    rid: Any                    # as the caller gave it at open (reports use it)
    inc: str
    host: str | None            # live there (state live)
    state: str = "live"         # live, paged, waiting, recovering
    delivered: int = -1         # last frame delivered (acknowledged)
    digest: int | None = None   # that frame's digest
    reported: int = -1          # last frame returned to a caller or reported lost
    checkpoint: int | None = None
    paged: tuple | None = None  # (host, host token, image ref or None)
    dead_host: str | None = None
    parked_on: str | None = None


class _Down(Exception):
    """Internal: the host incarnation the router knew is gone; ``why``: how
    the router found out, when it was not Ray telling it (a timeout)."""

    def __init__(self, host: str, why: str | None = None):
        super().__init__(host)
        self.host, self.why = host, why


#: What :meth:`RouterCore._try` returns for a call that failed.
_FAILED = object()

#: RouterCore calls that only read: no retries of earlier calls first, and
#: a client retries them once on a restarted router.
_VIEWS = {"state", "live", "inventory", "alive", "incarnation", "load"}
#: RouterCore methods a client may call.
_CALLS = _VIEWS | {"attach", "open", "close", "step", "migrate", "offload", "page_in",
                   "host_died", "restore_waiting", "release_stale"}


class RouterCore:
    """The placement of every request over ``hosts`` (name -> SessionHost
    actor handle), as one Ray actor (:class:`SessionRouter` creates it:
    named, detached, restarted by Ray when it dies). ``call_timeout_s``: a
    host call that does not answer within it counts as the host's death
    (the actor is killed; Ray restarts it if it has restarts left);
    ``probe_timeout_s`` bounds the wait for a host that died to come back
    restarted. Construction rebuilds the placement from the hosts."""

    def __init__(self, hosts: dict[str, Any], call_timeout_s: float = 600.0,
                 probe_timeout_s: float = 120.0):
        self.hosts: dict[str, Any] = {}
        self.call_timeout_s, self.probe_timeout_s = call_timeout_s, probe_timeout_s
        self.tokens: dict[str, str] = {}
        self.capacity: dict[str, int] = {}
        self.dead: set[str] = set()
        self.sessions: dict[str, _Session] = {}
        self.pending: list[tuple[str, str, str, str]] = []   # (op, host, key, inc) to retry
        self.unreported: dict[Any, Recovery] = {}
        self._probed: dict[str, str | None] = {}
        self._token = new_incarnation()
        self._rebuild(hosts)

    # ---- the client's entry ------------------------------------------------
    def call(self, method: str, args: tuple, kwargs: dict, acks: dict) -> Any:
        """Every client call: the client's acknowledgements first (request
        key -> (incarnation, frame, digest) of the last frame it received),
        then the retries left over by earlier calls, then ``method``."""
        if method not in _CALLS:
            raise RingKVKeyError(f"no router call {method!r}")
        for key, (inc, frame, digest) in acks.items():
            s = self.sessions.get(key)
            if s is not None and s.inc == inc and frame > s.delivered:
                s.delivered, s.digest = frame, digest
        if method not in _VIEWS:
            self._retry_pending()
        return getattr(self, method)(*args, **kwargs)

    def identity(self) -> str:
        """This router actor's incarnation token (a restart draws another)."""
        return self._token

    # ---- building the placement from the hosts ------------------------------
    def attach(self, hosts: dict[str, Any] | None) -> list[str]:
        """A client's hosts: names not known yet are added (their sessions
        adopted); a known name must be the same actor. Returns the hosts."""
        for name, h in (hosts or {}).items():
            if name in self.hosts:
                if self.hosts[name]._actor_id != h._actor_id:
                    raise RingKVRuntimeError(f"router host {name!r} is another actor; a router's "
                                             "host names are fixed")
                continue
            self._rebuild({name: h})
        return sorted(self.hosts)

    def _rebuild(self, hosts: dict[str, Any]) -> None:
        """Adopts ``hosts`` and the sessions they hold (a paged-out one's
        image is not known here: a page-in restores it from its checkpoint);
        what migrations left (frozen copies, reservations) goes to pending."""
        refs = {n: h.inventory.remote() for n, h in hosts.items()}
        invs = {}
        for n, ref in refs.items():
            self.hosts[n] = hosts[n]
            for _ in range(2):            # a host restarting: once more when it answers
                try:
                    invs[n] = ray.get(ref, timeout=self.probe_timeout_s)
                    break
                except (RayActorError, GetTimeoutError):
                    if self._probe(n) is None:
                        break
                    ref = hosts[n].inventory.remote()
            if n not in invs:
                self.dead.add(n)
        live = {(n, k) for n, inv in invs.items() for k, v in inv["held"].items()
                if not v["frozen"]}
        adopt = self.sessions.setdefault
        for n, inv in invs.items():
            self.tokens[n], self.capacity[n] = inv["token"], inv["capacity"]
            for k, v in inv["held"].items():
                if v["frozen"]:
                    elsewhere = any(key == k for (m, key) in live if m != n)
                    self.pending.append(("release" if elsewhere else "thaw", n, k, v["inc"]))
                    if not elsewhere:
                        self.sessions[k] = _Session(k, v["inc"], n, delivered=v["delivered"])
                else:
                    adopt(k, _Session(k, v["inc"], n, delivered=v["delivered"]))
            for k, v in inv["incoming"].items():
                self.pending.append(("cancel", n, k, v["inc"]))
            for k, v in inv["paged"].items():
                adopt(k, _Session(k, v["inc"], None, "paged", v["delivered"],
                                  paged=(n, self.tokens[n], None)))
            for k, rec in inv["parked"].items():
                adopt(k, _Session(k, rec["inc"], None, "waiting", rec.get("delivered", -1),
                                  dead_host=rec.get("dead_host", n), parked_on=n))

    # ---- host calls ------------------------------------------------------------
    def _get(self, host: str, ref: Any, call: str, key: Any = None) -> Any:
        """ray.get of a host call: a Ray error for the host's death, its
        restart (StaleHostError) or a timeout is _Down (after which
        :meth:`_host_down` must run); any other failure is a HostError."""
        try:
            return ray.get(ref, timeout=self.call_timeout_s)
        except GetTimeoutError:
            ray.kill(self.hosts[host], no_restart=False)   # a hang counts as a death
            return self._gone(host, call, key, None,
                              f"no answer within call_timeout_s = {self.call_timeout_s:g} s: "
                              "killed")
        except RayActorError as exc:
            return self._gone(host, call, key, exc)
        except RayError as exc:
            cause = getattr(exc, "cause", None) or exc
            if isinstance(cause, StaleHostError):
                return self._gone(host, call, key, cause)
            raise _host_error(host, call, key, cause) from None

    def _gone(self, host: str, call: str, key: Any, exc: BaseException | None,
              why: str | None = None) -> Any:
        token = self._probe(host)
        if token is not None and token == self.tokens.get(host):
            raise _host_error(host, call, key, exc or RuntimeError(why or "no answer"),
                              " (the host is alive; the call's effect is unknown)")
        self._probed[host] = token
        raise _Down(host, why)

    def _probe(self, host: str) -> str | None:
        """The host's incarnation token once it answers (restarted: a new
        one), or None when Ray says it died for good or it does not answer
        within probe_timeout_s (it is then killed, so that it never acts
        again)."""
        h = self.hosts[host]
        end = time.monotonic() + self.probe_timeout_s
        while True:
            left = end - time.monotonic()
            if left <= 0:
                ray.kill(h, no_restart=True)
                return None
            try:
                return ray.get(h.identity.remote(), timeout=left)
            except ActorDiedError:
                return None
            except (RayActorError, GetTimeoutError):
                continue      # restarting: ask again until it answers or the deadline
            except RayError:
                return None

    def _call(self, host: str, method: str, *args: Any, key: Any = None, **kwargs: Any) -> Any:
        ref = getattr(self.hosts[host], method).remote(*args, token=self.tokens[host], **kwargs)
        return self._get(host, ref, method, key)

    def _try(self, host: str, method: str, *args: Any, key: Any = None, on_error: Any = "raise",
             down: set | None = None, **kwargs: Any) -> Any:
        """:meth:`_call`, returning _FAILED when it fails: a host found gone
        is handled now (:meth:`_host_down`), or added to ``down`` when given
        (then not asked again; the caller handles it); a HostError is
        raised (``on_error`` "raise"), dropped ("drop"), or else
        ``on_error`` is the entry (op, host, key, inc) kept in ``pending``
        to retry in a later call."""
        if down is not None and host in down:
            return _FAILED
        try:
            return self._call(host, method, *args, key=key, **kwargs)
        except _Down as d:
            if down is None:
                self._host_down(d.host)
            else:
                down.add(d.host)
        except HostError:
            if on_error == "raise":
                raise
            if on_error != "drop":
                self.pending.append(on_error)
        return _FAILED

    # ---- deaths and recovery ------------------------------------------------------
    def _host_down(self, host: str) -> None:
        """The host incarnation the router knew is gone: the host is dead
        (Ray says so, or it never answered) or was restarted (then it is
        used again, empty, under its new token). Each of its live sessions
        is recovered (:meth:`_recover`); its paged-out sessions keep their
        images (a page-in restores them elsewhere); its leftover retries
        are dropped; its parked records are parked elsewhere."""
        if host in self.dead:
            self._probed.pop(host, None)
            return
        token = self._probed.pop(host, None) if host in self._probed else self._probe(host)
        if token is None:
            self.dead.add(host)
        elif token == self.tokens.get(host):
            return
        else:
            self.tokens[host] = token
        self.pending = [p for p in self.pending if p[1] != host]
        victims = [k for k, s in self.sessions.items() if s.state == "live" and s.host == host]
        for k in victims:
            self.sessions[k].state = "recovering"
        for s in self.sessions.values():
            if s.state == "waiting" and s.parked_on == host:
                s.parked_on = None
                self._park(s)
        for k in victims:
            self.unreported.update(self._recover(k, host))

    def _recover(self, key: str, dead_host: str, image: Any = None) -> dict[Any, Recovery]:
        """Brings session ``key`` back on the least-loaded alive host with
        room (SessionHost.recover: its image or current-incarnation
        checkpoint, then replayed to its last delivered frame); without
        room it waits, parked."""
        s = self.sessions[key]
        last_error, refused = None, set()
        for _ in range(3 * len(self.hosts) + 2):
            try:
                target = self._least_loaded(exclude=refused)
            except RingKVRuntimeError:
                break
            try:
                got = self._call(target, "recover", key, s.inc, s.delivered, image=image,
                                 digest=s.digest, key=s.rid)
            except _Down as d:
                self._host_down(d.host)
                continue
            except HostError as exc:
                if image is not None:      # the image could not be used: the checkpoint then
                    image = None
                    continue
                last_error = str(exc)      # this host refused it: another one
                refused.add(target)
                continue
            self._unpark(s)
            s.state, s.host, s.dead_host, s.paged = "live", target, None, None
            clock = got["clock"]
            lost = list(range(s.delivered + 1, clock + 1)) if clock is not None else []
            s.reported = max(s.delivered, -1 if clock is None else clock)
            return {s.rid: Recovery(s.rid, dead_host, target, got["resumed_from"], lost,
                                    got["replayed"], got["source"], got["refused"], s.inc,
                                    got["digest_ok"])}
        s.state, s.host, s.dead_host = "waiting", None, dead_host
        self._park(s)
        return {s.rid: Recovery(s.rid, dead_host, None, None, [], [], "", None, s.inc, None,
                                last_error)}

    def _park(self, s: _Session) -> None:
        """Keeps a waiting session's record on an alive host (a router
        rebuilt from the hosts then still knows it); none alive: here only."""
        key = request_key(s.rid)
        for n in self.alive():
            try:
                self._call(n, "park", key, {"inc": s.inc, "delivered": s.delivered,
                                            "dead_host": s.dead_host}, key=s.rid)
                s.parked_on = n
                return
            except (_Down, HostError):
                continue

    def _unpark(self, s: _Session) -> None:
        n, s.parked_on = s.parked_on, None
        if n in self.hosts and n not in self.dead:
            self._try(n, "unpark", request_key(s.rid), key=s.rid, on_error="drop")

    def _each(self, method: str, key: str | None = None) -> dict[str, Any]:
        """Each alive host's answer to ``method`` (of ``key`` when given),
        all asked at once; one that raises is left out. Hosts found gone
        are handled first (their sessions recovered), then asked again."""
        while True:
            refs = {n: getattr(self.hosts[n], method).remote(
                *(() if key is None else (key,)), token=self.tokens[n]) for n in self.alive()}
            out, down = {}, []
            for n, ref in refs.items():
                try:
                    out[n] = self._get(n, ref, method, key)
                except _Down:
                    down.append(n)
                except HostError:
                    pass
            if not down:
                return out
            for n in down:
                self._host_down(n)

    def _least_loaded(self, exclude: Iterable[str] = (), statuses: dict | None = None) -> str:
        """The alive host with the fewest busy slots (as the hosts count
        them: anyone's) and a free one; RingKVRuntimeError saying why there
        is none."""
        st = self._each("status") if statuses is None else statuses
        alive = [n for n in self.alive() if n not in set(exclude) and n in st]
        room = [n for n in alive if st[n]["free"] > 0]
        if not room:
            if not self.alive():
                raise RingKVRuntimeError(f"no alive host: every host died "
                                         f"({_names(self.dead)})")
            full = ", ".join(f"{n} {st[n]['capacity'] - st[n]['free']}/{st[n]['capacity']}"
                             for n in sorted(alive))
            raise RingKVRuntimeError(f"no alive host has a free session slot ({full})")
        return min(room, key=lambda n: (st[n]["capacity"] - st[n]["free"], n))

    def _retry_pending(self) -> None:
        """Retries what earlier calls left undone: releasing frozen copies,
        thawing, cancelling reservations."""
        todo, self.pending = self.pending, []
        for op, host, key, inc in todo:        # op: the host method
            if host in self.dead:
                continue
            ask = functools.partial(self._try, host, key=key, on_error=(op, host, key, inc))
            if op == "thaw":
                s = self.sessions.get(key)
                if s is None or s.host != host or s.inc != inc:
                    continue
            elif op == "release":
                st = ask("status", key)
                if st is _FAILED or st["state"] != "frozen" or st["inc"] != inc:
                    continue
            ask(op, key, inc=inc)

    def _take_recovered(self) -> dict[Any, Recovery]:
        out, self.unreported = self.unreported, {}
        return out

    # ---- names ---------------------------------------------------------------------
    def _host(self, host: str) -> str:
        if host not in self.hosts:
            raise RingKVKeyError(f"no host named {host!r}; hosts: {_names(self.hosts)}")
        return host

    def _placed_names(self, state: str) -> list[Any]:
        return [s.rid for s in self.sessions.values() if s.state == state]

    def _elsewhere(self, s: _Session) -> str | None:
        if s.state == "paged":
            return (f"request {_show(s.rid)!r} is paged out (of host {s.paged[0]}); "
                    "SessionRouter.page_in brings it back")
        if s.state == "waiting":
            return (f"request {_show(s.rid)!r} is waiting for room since its host "
                    f"{s.dead_host} died; SessionRouter.restore_waiting brings it back")
        if s.state == "recovering":
            return f"request {_show(s.rid)!r} is being recovered"
        return None

    def _known(self, request_id: Any) -> tuple[str, _Session]:
        key = request_key(request_id)
        s = self.sessions.get(key)
        if s is None:
            also = "".join(f"; {what}: {_names(ids)}" for what, ids in
                           (("paged out", self._placed_names("paged")),
                            ("waiting", self._placed_names("waiting"))) if ids)
            raise RingKVKeyError(f"no session with request id {_show(request_id)!r}; known: "
                                 f"{_names(self._placed_names('live'))}{also}")
        return key, s

    def _live(self, request_id: Any) -> tuple[str, _Session]:
        key, s = self._known(request_id)
        why = self._elsewhere(s)
        if why is not None:
            raise RingKVRuntimeError(why)
        return key, s

    # ---- placement -------------------------------------------------------------------
    def alive(self) -> list[str]:
        return [n for n in self.hosts if n not in self.dead]

    def load(self, host: str) -> int:
        """Busy slots of ``host`` as it counts them (held, reserved);
        RingKVKeyError for a host the router was never given."""
        st = {} if self._host(host) in self.dead else self._each("status")
        return st[host]["capacity"] - st[host]["free"] if host in st else 0

    def incarnation(self, request_id: Any) -> str:
        return self._known(request_id)[1].inc

    def open(self, request_id: Any) -> str:
        """Places a new request (a new incarnation) on the least-loaded host
        as the hosts count their slots (a placed one stays where it is:
        affinity); returns the host. A request live on a host that the
        router did not place there (opened on the host itself) is adopted
        where it is; held there otherwise (reserved, paged out), or paged
        out or waiting here (bring it back instead), it is refused."""
        key = request_key(request_id)
        if key in self.sessions:
            return self._live(request_id)[1].host
        tried: set[str] = set()
        while True:
            st = self._each("status", key)
            for n, v in st.items():
                if v["state"] == "live":
                    self.sessions[key] = _Session(request_id, v["inc"], n)
                    return n
                if v["state"] is not None:
                    raise RingKVRuntimeError(f"request {_show(request_id)!r} is {v['state']} on "
                                             f"host {n}, outside this router")
            host = self._least_loaded(exclude=tried, statuses=st)
            inc = new_incarnation()
            try:
                self._call(host, "open", key, inc, key=request_id)
            except _Down as d:
                self._host_down(d.host)
                continue
            except HostError as exc:
                if "RKV_ERR_FULL" in str(exc):     # taken meanwhile: the next host
                    tried.add(host)
                    continue
                raise
            self.sessions[key] = _Session(request_id, inc, host)
            return host

    def close(self, request_id: Any) -> None:
        """Releases a session for good and retires its incarnation (its
        checkpoint file goes; a later open of the id is a new session)."""
        key, s = self._known(request_id)
        if s.state == "recovering":
            raise RingKVRuntimeError(self._elsewhere(s))
        while s.state == "live":             # a host gone: recovered elsewhere (or waits)
            if self._try(s.host, "close", key, inc=s.inc, key=s.rid) is not _FAILED:
                break
        if s.state == "paged":
            home, token, _ = s.paged
            if home not in self.dead and self.tokens.get(home) == token:
                self._try(home, "discard", key, inc=s.inc, key=s.rid)
        if s.state in ("paged", "waiting"):
            self._unpark(s)
            for n in self.alive():
                try:
                    self._call(n, "retire", key, s.inc, key=s.rid)
                    break
                except (_Down, HostError):
                    continue
        rec = self.unreported.get(s.rid)
        if rec is not None and rec.incarnation == s.inc:
            del self.unreported[s.rid]   # recovered on the way, then closed: no news
        del self.sessions[key]

    # ---- frames ------------------------------------------------------------------------
    def step(self, request_ids: Iterable[Any] | None = None) -> StepReport:
        """One frame of each request (default: every live one), each host
        stepping its own as one batch, all hosts at once; every request is
        checked before any host steps. A dead (or restarted) host's
        sessions are recovered, not stepped (:class:`StepReport` says what
        else is reported). A host that raises (not dead) does not stop the
        others: their results are recorded, then its HostError is raised
        with the report as its ``step_report``."""
        if request_ids is None:
            keys = [k for k, s in self.sessions.items() if s.state == "live"]
        else:
            keys = [self._live(r)[0] for r in request_ids]
        by_host: dict[str, list[str]] = {}
        for k in keys:
            by_host.setdefault(self.sessions[k].host, []).append(k)
        calls = {h: self.hosts[h].step.remote(
            [(k, self.sessions[k].inc, self.sessions[k].delivered) for k in ks],
            token=self.tokens[h]) for h, ks in by_host.items()}
        report = StepReport()
        failed: dict[str, BaseException] = {}
        down: list[str] = []
        for host, ref in calls.items():
            try:
                got = self._get(host, ref, "step")
            except _Down:
                down.append(host)
                continue
            except HostError as exc:
                exc.request_id = [self.sessions[k].rid for k in by_host[host]]
                failed[host] = exc
                continue
            for k, r in got.items():
                s = self.sessions[k]
                seen = max(s.delivered, s.reported)
                if r["frame"] > seen + 1:
                    report.lost[s.rid] = list(range(seen + 1, r["frame"]))
                s.reported = r["frame"]
                if r["checkpoint"] is not None:
                    s.checkpoint = r["checkpoint"]
                if r.get("checkpoint_error") is not None:
                    report.checkpoint_errors[s.rid] = r["checkpoint_error"]
                report.results[s.rid] = r
        for host in down:
            self._host_down(host)
        report.recovered.update(self._take_recovered())
        if failed:
            exc = next(iter(failed.values()))
            note = (f"SessionRouter.step: host(s) {_names(failed)} raised; the results of "
                    f"the other hosts ({_names(set(calls) - set(failed) - set(down))}) are "
                    "recorded, in last_frame/last_checkpoint and in this exception's step_report")
            exc.add_note(note)
            exc.step_report = report  # type: ignore[attr-defined]
            raise exc
        return report

    # ---- failures -----------------------------------------------------------------------
    def host_died(self, host: str) -> dict[Any, Recovery]:
        """Treats ``host``'s incarnation as gone (marks it dead unless it
        answers restarted; kills it first, so that it never acts again)
        and recovers its sessions. RingKVKeyError for a host the router was
        never given."""
        self._host(host)
        if host in self.dead:
            return {}
        ray.kill(self.hosts[host], no_restart=False)
        token = self._probe(host)
        self._probed[host] = None if token == self.tokens.get(host) else token
        self._host_down(host)
        return self._take_recovered()

    def restore_waiting(self) -> dict[Any, Recovery]:
        """Restores the sessions of dead hosts that found no room before."""
        out = {}
        for k in [k for k, s in self.sessions.items() if s.state == "waiting"]:
            try:
                self._least_loaded()
            except RingKVRuntimeError:
                break
            s = self.sessions[k]
            s.state = "recovering"
            out.update(self._recover(k, s.dead_host or "?"))
        return out

    def release_stale(self) -> dict[Any, str]:
        """Retries what failed migrations left (frozen copies to release or
        thaw, reservations to cancel); returns the frozen copies still left
        (request -> host)."""
        self._retry_pending()
        return self._stale()

    def _stale(self) -> dict[Any, str]:
        return {self.sessions[k].rid if k in self.sessions else k: h
                for op, h, k, _ in self.pending if op == "release"}

    # ---- migration -------------------------------------------------------------------------
    def migrate(self, request_id: Any, host: str) -> Migration:
        """Moves a session to ``host`` between two frames (docs/migration.md
        has the protocol). Raises MigrationError, with the session live and
        unchanged at its source, when any step before the import fails (names
        are checked first: the module's docstring)."""
        key, s = self._live(request_id)
        src_name, dst_name = s.host, self._host(host)
        if dst_name in self.dead:
            raise _migration_error(s.rid, "reserve", src_name, dst_name,
                                   RuntimeError(f"host {dst_name} is not alive (alive: "
                                                f"{_names(self.alive())})"))
        if src_name == dst_name:
            try:
                clock = self._call(src_name, "clock", key, key=s.rid)
            except _Down as d:
                self._host_down(d.host)
                err = _migration_error(s.rid, "meta", src_name, dst_name,
                                       RingKVRuntimeError(f"host {src_name} died"))
                err.recovered = self._take_recovered()
                raise err from None
            return Migration(s.rid, src_name, dst_name, 0, 0.0, clock, True)
        src_token = self.tokens[src_name]
        step, meta2 = "meta", None
        t0 = time.perf_counter()
        try:
            meta = self._call(src_name, "meta", key, inc=s.inc, key=s.rid)
            step = "reserve"
            self._call(dst_name, "reserve", meta, inc=s.inc, key=s.rid)
            step = "export"
            meta_ref, digest_ref, data_ref = self.hosts[src_name].export.options(
                num_returns=3).remote(key, inc=s.inc, token=src_token)
            meta2, digest = self._get(src_name, [meta_ref, digest_ref], "export", s.rid)
            step = "fill"
            moved = self._call(dst_name, "fill", key, data_ref, digest, inc=s.inc, key=s.rid)
            del data_ref
            step = "commit"
            clock = self._call(dst_name, "commit", key, meta2, inc=s.inc, delivered=s.delivered,
                               key=s.rid)
        except (_Down, HostError) as exc:
            done = self._roll_back(key, s, src_name, dst_name, step, meta2, exc)
            if done is None:
                cause = exc if not isinstance(exc, _Down) else RingKVRuntimeError(
                    f"host {exc.host} died (or restarted) during {step}")
                err = _migration_error(s.rid, step, src_name, dst_name, cause)
                err.recovered = self._take_recovered()
                raise err from None
            moved, clock = 0, done[0]
        pause = time.perf_counter() - t0
        s.host = dst_name
        released = src_name not in self.dead and self.tokens.get(src_name) == src_token and \
            self._try(src_name, "release", key, inc=s.inc, key=s.rid,
                      on_error=("release", src_name, key, s.inc)) is not _FAILED
        return Migration(s.rid, src_name, dst_name, int(moved), pause, clock, released,
                         self._take_recovered())

    def _roll_back(self, key: str, s: _Session, src_name: str, dst_name: str, step: str,
                   meta2: Any, exc: BaseException) -> tuple | None:
        """Undoes a migration that failed at ``step`` (``meta2``: the
        export's metadata, once it arrived); returns None when it is undone
        (the session at its source; if the source died, restored
        elsewhere), or ``(clock,)`` when it went through after all
        (the commit happened at the destination, or the source died after
        the destination verified its copy, which is then imported: nothing
        lost)."""
        down = {exc.host} if isinstance(exc, _Down) else set()
        ask = functools.partial(self._try, key=s.rid, down=down, on_error="drop")
        if step == "commit":                  # did the import happen before the failure?
            st = ask(dst_name, "status", key)
            if st is not _FAILED and st["state"] == "live" and st["inc"] == s.inc:
                return (st["clock"],)
        exported = step in ("export", "fill", "commit")      # the slot reserved too
        if exported:
            ask(src_name, "thaw", key, inc=s.inc, on_error=("thaw", src_name, key, s.inc))
        else:
            ask(src_name, "status", None)
        if src_name in down and meta2 is not None:
            verified = step == "commit"
            if not verified:                  # a fill that verified before its reply failed
                st = ask(dst_name, "status", key)
                verified = st is not _FAILED and st["state"] == "incoming" and \
                    st["verified"] and st["inc"] == s.inc
            if verified:                      # the destination's verified copy: nothing lost
                clock = ask(dst_name, "commit", key, meta2, inc=s.inc, delivered=s.delivered)
                if clock is not _FAILED:
                    s.host = dst_name
                    self._host_down(src_name)
                    return (clock,)
        if exported:
            ask(dst_name, "cancel", key, inc=s.inc, on_error=("cancel", dst_name, key, s.inc))
        for h in (dst_name, src_name):
            if h in down:
                self._host_down(h)
        return None

    # ---- offload -----------------------------------------------------------------------------
    def offload(self, request_id: Any) -> int:
        """Pages a session out of its host: the image goes into Ray's object
        store (this router owns the reference), the slot is free; returns
        the image's size in bytes."""
        key, s = self._live(request_id)
        host = s.host
        image_ref, size_ref = self.hosts[host].offload.options(num_returns=2).remote(
            key, inc=s.inc, token=self.tokens[host])
        try:
            nbytes = self._get(host, size_ref, "offload", s.rid)
        except _Down as d:
            self._host_down(d.host)
            died = "the host died" + (f" ({d.why})" if d.why else "")
            err = _host_error(host, "offload", s.rid, RuntimeError(died),
                              "; its sessions were recovered, this one is live again "
                              "elsewhere (or waiting)")
            err.recovered = self._take_recovered()
            raise err from None
        s.state, s.host, s.paged = "paged", None, (host, self.tokens[host], image_ref)
        return int(nbytes)

    def page_in(self, request_id: Any) -> str:
        """Brings a paged-out session back: on the host that paged it out
        (its id is reserved there), or, when that host died or restarted
        (or the image is gone), on the least-loaded alive host from its
        image (or its checkpoint, replayed to its last delivered frame).
        Returns the host."""
        key = request_key(request_id)
        s = self.sessions.get(key)
        if s is None:
            raise RingKVKeyError(f"no paged-out session with request id {_show(request_id)!r}; "
                                 f"paged out: {_names(self._placed_names('paged'))}")
        if s.state != "paged":
            if s.state == "live":
                raise RingKVRuntimeError(f"request {_show(s.rid)!r} is not paged out: it is "
                                         f"live on host {s.host}")
            raise RingKVRuntimeError(self._elsewhere(s))
        home, token, ref = s.paged
        if home not in self.dead and self.tokens.get(home) == token:    # as it paged out
            if ref is None:
                self._try(home, "discard", key, inc=s.inc, key=s.rid)
            elif self._try(home, "page_in", ref, request_id=key, inc=s.inc, key=s.rid) \
                    is not _FAILED:
                s.state, s.host, s.paged = "live", home, None
                return home
        s.state = "recovering"
        self.unreported.update(self._recover(key, home, image=ref))
        if s.state != "live":
            raise RingKVRuntimeError(f"request {_show(s.rid)!r} could not be paged in: its "
                                     f"host {home} is gone and no alive host has room; it "
                                     "waits (SessionRouter.restore_waiting)")
        return s.host

    # ---- views ---------------------------------------------------------------------------------
    def live(self) -> dict[str, dict[Any, int | None]]:
        """Each alive host's live sessions and clocks (as the hosts see it)."""
        rid = {k: s.rid for k, s in self.sessions.items()}
        return {n: {rid.get(k, k): v["clock"] for k, v in inv["held"].items() if not v["frozen"]}
                for n, inv in self.inventory().items()}

    def inventory(self) -> dict[str, dict]:
        """Each alive host's SessionHost.inventory (keys: str request ids). A
        host found gone is handled first (its sessions recovered)."""
        return self._each("inventory")

    def state(self) -> dict:
        """The router's records: one key per SessionRouter view (``where``,
        ``last_frame``, ...), and ``pending`` and ``tokens``."""
        ss = self.sessions.values()
        return {"where": {s.rid: s.host for s in ss if s.state == "live"},
                "last_frame": {s.rid: s.delivered for s in ss if s.delivered >= 0},
                "last_checkpoint": {s.rid: s.checkpoint for s in ss if s.checkpoint is not None},
                "incarnations": {s.rid: s.inc for s in ss},
                "paged_out": {s.rid: s.paged[0] for s in ss if s.state == "paged"},
                "waiting": {s.rid: s.dead_host for s in ss if s.state == "waiting"},
                "stale": self._stale(),
                "pending": list(self.pending),
                "dead": set(self.dead), "hosts": dict(self.hosts),
                "capacity": dict(self.capacity), "tokens": dict(self.tokens)}


@functools.cache
def _core_class() -> Any:
    return ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=0)(RouterCore)


def _view(name: str, doc: str) -> property:
    """A SessionRouter property: ``name`` of the router actor's state."""
    return property(lambda self: self._ask("state")[name], doc=doc)


@python_calls("SessionRouter")
class SessionRouter:
    """A handle on the router named ``name`` in Ray namespace ``namespace``
    (:class:`RouterCore`, created on first use with ``hosts`` (name ->
    SessionHost actor handle); ``checkpoint_dir`` is accepted for the
    hosts' folder, which the hosts keep): every SessionRouter of that name, in any driver of
    the cluster, shares one placement. ``hosts`` None: the router must
    exist (RingKVKeyError otherwise). Given to an existing router, hosts it
    does not have are added. Its calls are RouterCore's, run in that
    actor; the handle acknowledges the frames it received (the last one of
    each session) with each call."""

    def __init__(self, hosts: dict[str, Any] | None = None, checkpoint_dir: str | None = None,
                 *, name: str = "ringkv-router", namespace: str = "ringkv",
                 call_timeout_s: float = 600.0, probe_timeout_s: float = 120.0):
        self.name, self.namespace = name, namespace
        self._hosts = dict(hosts) if hosts else None
        self._args = (call_timeout_s, probe_timeout_s)
        self._acks: dict[str, tuple[str, int, int]] = {}
        self.core = self._connect()                #: the router actor's handle
        self._ask("attach", self._hosts)

    def _connect(self) -> Any:
        if self._hosts is None:
            try:
                return ray.get_actor(self.name, namespace=self.namespace)
            except ValueError:
                raise RingKVKeyError(f"no router named {self.name!r} in namespace "
                                     f"{self.namespace!r}; give its hosts to create it") from None
        return _core_class().options(name=self.name, namespace=self.namespace,
                                     get_if_exists=True, lifetime="detached").remote(
            self._hosts, *self._args)

    def _ack(self, report: Any) -> Any:
        """Keeps the frames of a StepReport to acknowledge; returns ``report``."""
        for rid, r in getattr(report, "results", {}).items():
            self._acks[request_key(rid)] = (r["inc"], r["frame"], r["digest"])
        return report

    def _ask(self, method: str, *args: Any, **kwargs: Any) -> Any:
        for attempt in (0, 1):
            try:
                return self._ack(ray.get(self.core.call.remote(method, args, kwargs,
                                                                dict(self._acks))))
            except RayActorError as exc:
                if isinstance(exc, ActorDiedError):
                    self.core = self._connect()
                if method in _VIEWS and attempt == 0:
                    continue
                raise RouterRestartedError(
                    f"the router actor {self.name!r} died during {method}: its effect is "
                    "unknown; the router was restarted and rebuilt its placement from the "
                    f"hosts; call again ({type(exc).__name__})") from None
            except RayError as exc:
                cause = getattr(exc, "cause", None)
                if not isinstance(cause, BaseException):   # Ray's own, not the router's
                    raise HostError(f"the router actor {self.name!r} ({method}): "
                                    f"{type(exc).__name__}: {exc}", None, method,
                                    args[0] if args else None, exc) from None
                self._ack(getattr(cause, "step_report", None))
                raise cause from None
        raise AssertionError("unreachable")

    # ---- views (each a fresh read of the router actor's records) -------------
    where = _view("where", "Request -> the host where it is live.")
    last_frame = _view("last_frame", "Request -> its last delivered frame.")
    last_checkpoint = _view("last_checkpoint",
                            "Request -> the frame of its last checkpoint a host reported.")
    incarnations = _view("incarnations", "Request -> its incarnation.")
    paged_out = _view("paged_out", "Request -> the host it was paged out of.")
    waiting = _view("waiting", "Request -> its dead host, for sessions that found no room yet.")
    stale = _view("stale", "Request -> the host holding a frozen copy left to release.")
    dead = _view("dead", "Hosts dead for good.")
    hosts = _view("hosts", "Host name -> actor handle.")
    capacity = _view("capacity", "Host name -> its model's sessions.")

    # ---- calls (the others, RouterCore's, are added below the class) -------------
    @functools.wraps(RouterCore.close)
    def close(self, request_id: Any) -> None:
        self._ask("close", request_id)
        self._acks.pop(request_key(request_id), None)

    @functools.wraps(RouterCore.step)
    def step(self, request_ids: Iterable[Any] | None = None) -> StepReport:
        return self._ask("step", None if request_ids is None else list(request_ids))

    def shutdown(self, deadline_s: float = 120.0) -> None:
        """Kills the router actor (every handle of its name) and waits until
        Ray reports it dead: the hosts keep their sessions; a new
        SessionRouter of the name rebuilds the placement from them."""
        ray.kill(self.core, no_restart=True)
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            try:
                ray.get(self.core.identity.remote(), timeout=max(0.1, end - time.monotonic()))
            except RayActorError:
                return
            except GetTimeoutError:
                continue
        raise RingKVRuntimeError(f"the router actor {self.name!r} still answers {deadline_s} s "
                                 "after ray.kill")


def _forward(method: str) -> Any:
    """A SessionRouter call that runs RouterCore's ``method`` (its
    signature and docstring) in the router actor."""
    @functools.wraps(getattr(RouterCore, method))
    def call(self: SessionRouter, *args: Any, **kwargs: Any) -> Any:
        return self._ask(method, *args, **kwargs)
    return python_call(f"SessionRouter.{method}")(call)


for _m in sorted(_CALLS - {"attach", "close", "step", "state"}):
    setattr(SessionRouter, _m, _forward(_m))
