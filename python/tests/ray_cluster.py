"""A real local Ray cluster on loopback for the tests of ringkv.ray
(test_ray.py, test_migration.py, test_offload.py): one for the test
session (conftest.py's ``ray_cluster`` fixture, started on first use by
:func:`ringkv.ray.init_loopback`: node 127.0.0.1, no dashboard, no usage
statistics, a small object store), always shut down in a ``finally``,
after which no process of it may be left; each test gets its own hosts
(actors killed in a ``finally``).

Skipped when Ray or xxhash is not importable (``pip install ringkv[ray]``;
scripts/install-deps.sh installs both).
"""
from __future__ import annotations

import contextlib
import itertools
import os
import socket
import subprocess
import time

import pytest

import ringkv

CONFIG = ringkv.preset("demo", num_sessions=4)  # 2 layers, f32, 1.1 MiB a session


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def cluster_pids(ray) -> set[int]:
    """This driver and the processes its Ray node started."""
    node = ray._private.worker._global_node
    pids = {os.getpid()}
    for procs in node.all_processes.values():
        for p in procs:
            if p.process is not None:
                pids.add(p.process.pid)
    return pids


def _children(pids: set[int]) -> set[int]:
    """pids and their descendants (Ray's workers are the raylet's children)."""
    parent = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    parent[int(d)] = int(f.read().split(")")[-1].split()[1])
            except (OSError, ValueError, IndexError):
                pass
    out, grew = set(pids), True
    while grew:
        more = {p for p, pp in parent.items() if pp in out and p not in out}
        grew = bool(more)
        out |= more
    return out


def listening_addresses(pids: set[int]) -> list[str]:
    """Local addresses of the TCP sockets listening in these processes
    (/proc: their socket inodes, matched against /proc/net/tcp and tcp6)."""
    inodes = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    link = os.readlink(f"/proc/{pid}/fd/{fd}")
                except OSError:
                    continue
                if link.startswith("socket:["):
                    inodes.add(link[8:-1])
        except OSError:
            pass
    found = []
    for table, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if cols[3] != "0A" or cols[9] not in inodes:  # 0A: LISTEN
                continue
            raw = bytes.fromhex(cols[1].split(":")[0])
            words = [raw[i:i + 4][::-1] for i in range(0, len(raw), 4)]  # host-endian words
            found.append(socket.inet_ntop(family, b"".join(words)))
    return found


def is_loopback(address: str) -> bool:
    return address.startswith("127.") or address in ("::1", "::ffff:127.0.0.1") or \
        address.startswith("::ffff:127.")


def start_cluster():
    """Starts the loopback cluster (:func:`ringkv.ray.init_loopback`) and
    returns (the ray module, its processes)."""
    pytest.importorskip("xxhash")
    ray = pytest.importorskip("ray")
    import ringkv.ray as rr
    rr.init_loopback(num_cpus=2, object_store_memory=256 << 20)
    return ray, cluster_pids(ray)


def _raylets_of(session: str) -> list[str]:
    """`pgrep -af 'raylet|gcs_server'` lines of this cluster (their command
    lines name its session)."""
    try:
        out = subprocess.run(["pgrep", "-af", "raylet|gcs_server"], capture_output=True,
                             text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line for line in out.splitlines() if session in line and "pgrep" not in line]


def stop_cluster(ray, pids: set[int]) -> None:
    """ray.shutdown(), then no process of the cluster may be left: none of
    the processes it started or their children, and no raylet or gcs_server
    of its session (pgrep)."""
    session = ray._private.worker._global_node.session_name
    pids = _children(pids) - {os.getpid()}
    ray.shutdown()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and (any(_alive(p) for p in pids) or _raylets_of(session)):
        time.sleep(0.2)
    left = sorted(p for p in pids if _alive(p))
    assert not left, f"Ray processes left running after ray.shutdown(): {left}"
    assert not _raylets_of(session), f"raylet/gcs_server left running: {_raylets_of(session)}"


def _wait_actor(ray, actor, method: str, done, deadline_s: float, failure: str):
    """Calls ``actor.method()`` until ``done`` holds for what Ray answers
    (the result, or the RayActorError it raised) and returns that: a state
    waited for through Ray's own calls, never a time; the deadline only
    bounds a failure (``failure`` then fails the test)."""
    from ray.exceptions import GetTimeoutError, RayActorError
    end = time.monotonic() + deadline_s
    while True:
        left = end - time.monotonic()
        assert left > 0, failure
        try:
            got = ray.get(getattr(actor, method).remote(), timeout=left)
        except GetTimeoutError:
            continue
        except RayActorError as exc:
            got = exc
        if done(got):
            return got


def kill_and_wait(ray, actor, deadline_s: float = 120.0) -> None:
    """ray.kill(actor), then wait until Ray itself reports the actor dead.

    ray.kill is asynchronous: a call made right after it may still reach
    the live actor (a loaded machine makes that likely), so a test that
    needs a dead host waits for the state, not for a time: it calls the
    actor until Ray raises RayActorError for the call (from then on every
    call to the handle raises it, as the router must see). The deadline
    only bounds a failure; a death that never comes fails the test."""
    from ray.exceptions import RayActorError
    ray.kill(actor, no_restart=True)
    _wait_actor(ray, actor, "ping", lambda got: isinstance(got, RayActorError), deadline_s,
                f"actor {actor} still answers {deadline_s:.0f} s after ray.kill")


def restart_and_wait(ray, actor, deadline_s: float = 120.0) -> str:
    """ray.kill(actor) with its restart allowed, then wait until Ray runs
    it again: until its ``identity()`` (the incarnation token its
    constructor drew: a SessionHost's or the router actor's) answers with
    another token than before the kill (while it restarts, Ray raises
    RayActorError or holds the call). Returns the new token."""
    from ray.exceptions import RayActorError
    try:
        old = ray.get(actor.identity.remote())
    except RayActorError:
        old = None               # dying already (a fault armed in it): any answer is new
    ray.kill(actor, no_restart=False)
    return _wait_actor(ray, actor, "identity",
                       lambda got: not isinstance(got, Exception) and got != old, deadline_s,
                       f"actor {actor} did not come back restarted within {deadline_s:.0f} s")


_routers = itertools.count()


def router_name() -> str:
    """A router name of its own for each test (routers of one name share
    one placement: a test starts from none)."""
    return f"test-router-{os.getpid()}-{next(_routers)}"


@contextlib.contextmanager
def checked_cluster(ray, request, names, config, folder, every, router_kwargs=None, **kwargs):
    """SessionHosts ``names`` (make_hosts: ``config``, checkpoints every
    ``every`` frames into ``folder``; ``kwargs`` such as max_restarts) and a
    router of its own over them (``router_kwargs`` such as call_timeout_s:
    SessionRouter's), wrapped in the invariant checker
    (ray_invariants.Checked): yields (hosts, checked router). When the test
    passed, every invariant is checked at the end; the router and the
    actors are then killed."""
    import ringkv.ray as rr
    from ray_invariants import Checked
    failed = request.session.testsfailed
    hs = rr.make_hosts(names, config, str(folder), every, **kwargs)
    router = None
    try:
        router = rr.SessionRouter(hs, str(folder), name=router_name(), **(router_kwargs or {}))
        checked = Checked(router, hs, config, str(folder))
        yield hs, checked
        if request.session.testsfailed == failed:   # a failed test's state is no news
            checked.check()
    finally:
        if router is not None:
            router.shutdown()
        for h in hs.values():
            ray.kill(h)


@pytest.fixture
def hosts(ray_cluster, tmp_path, request):
    """Two SessionHosts (4 sessions each, checkpoints every 3 frames into
    tmp_path) and a router over them (checked: checked_cluster)."""
    with checked_cluster(ray_cluster, request, ["A", "B"], CONFIG, tmp_path, 3) as got:
        yield got


def assert_live_once(router) -> None:
    """Every placed request is live on exactly one host: its own."""
    seen: dict[str, str] = {}
    for host, live in router.live().items():
        for rid in live:
            assert rid not in seen, f"{rid!r} is live on {seen[rid]} and {host}"
            seen[rid] = host
    assert seen == router.where, (seen, router.where)
