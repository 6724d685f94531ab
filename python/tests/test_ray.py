"""ringkv on a real local Ray cluster (issue 13): hosts on loopback only,
placement on the least-loaded host with affinity, 4 sessions streaming
deterministic tokens through the 4+1 schedule on 2 hosts exactly as each
would alone, and a host killed mid-stream whose sessions resume on the
other from their last checkpoint with the frames after it reported lost.
Migration: test_migration.py; offload: test_offload.py."""
from __future__ import annotations

import pytest

from ray_cluster import CONFIG, assert_live_once, cluster_pids, hosts, is_loopback  # noqa: F401
from ray_cluster import listening_addresses, _children

stream = pytest.importorskip("ringkv.ray.stream", exc_type=ImportError)

RIDS = ["s0", "s1", "s2", "s3"]


@pytest.fixture(scope="module")
def reference():
    """Each session's frame digests when it streams alone, never moved."""
    return {r: stream.reference_digests(CONFIG, r, 11) for r in RIDS}


def test_cluster_listens_on_loopback_only(ray_cluster, hosts):
    hs, router = hosts
    assert {n["NodeManagerAddress"] for n in ray_cluster.nodes()} == {"127.0.0.1"}
    pids = cluster_pids(ray_cluster) | set(ray_cluster.get([h.pid.remote() for h in hs.values()]))
    addresses = listening_addresses(_children(pids))
    assert addresses, "no listening socket found: the check would see nothing"
    assert all(is_loopback(a) for a in addresses), addresses


def test_placement_least_loaded_with_affinity(hosts):
    hs, router = hosts
    placed = [router.open(r) for r in RIDS]
    assert sorted(placed) == ["A", "A", "B", "B"]
    assert placed[0] != placed[1]                      # least-loaded, alternating
    assert [router.open(r) for r in RIDS] == placed    # affinity: same host again
    assert router.load("A") == router.load("B") == 2
    assert_live_once(router)


def test_four_sessions_stream_as_alone(hosts, reference):
    hs, router = hosts
    for r in RIDS:
        router.open(r)
    for f in range(6):
        rep = router.step()
        assert not rep.recovered
        assert {r: rep.results[r]["frame"] for r in RIDS} == {r: f for r in RIDS}
        for r in RIDS:
            assert rep.results[r]["digest"] == reference[r][f], (r, f)
    assert router.last_checkpoint == {r: 5 for r in RIDS}  # every 3 frames: 2, then 5
    assert_live_once(router)


def test_killed_host_resumes_from_checkpoints(ray_cluster, hosts, reference):
    hs, router = hosts
    for r in RIDS:
        router.open(r)
    for f in range(7):                                  # frames 0..6; checkpoints 2 and 5
        router.step()
    victims = sorted(r for r in RIDS if router.where[r] == "A")
    ray_cluster.kill(hs["A"])                           # mid-stream, no warning
    rep = router.step()
    assert sorted(rep.recovered) == victims
    for r in victims:
        rec = rep.recovered[r]
        assert (rec.dead_host, rec.host, rec.resumed_from, rec.lost_frames) == ("A", "B", 5, [6])
    survivors = [r for r in RIDS if r not in victims]
    assert sorted(rep.results) == sorted(survivors)     # stepped on: frame 7
    assert all(rep.results[r]["frame"] == 7 for r in survivors)
    assert router.dead == {"A"} and all(router.where[r] == "B" for r in RIDS)
    assert_live_once(router)
    # the lost frames are recomputed, bit for bit, then everyone goes on
    while min(router.last_frame[r] for r in RIDS) < 10:
        behind = [r for r in RIDS if router.last_frame[r] < 10]
        for r, res in router.step(behind).results.items():
            assert res["digest"] == reference[r][res["frame"]], (r, res["frame"])


def test_router_names_what_it_does_not_know(ray_cluster, hosts):
    """Unknown request ids and host names are refused before any host is
    asked, with the binding's classes (RingKVKeyError, a KeyError) and the
    names the router knows; a request in the wrong place, a dead host or no
    alive host says which (RingKVRuntimeError). The trial's inputs first."""
    import ringkv
    import ringkv.ray as rr
    hs, router = hosts
    for r in ("r0", "r1", "r2"):
        router.open(r)
    router.step()
    where, frames = dict(router.where), dict(router.last_frame)

    def refused(cls, text, call):
        with pytest.raises(cls) as e:
            call()
        assert str(e.value) == text
        assert router.where == where and router.last_frame == frames and not router.dead

    unknown = "no session with request id 'nope'; known: r0, r1, r2"
    refused(ringkv.RingKVKeyError, unknown, lambda: router.migrate("nope", "B"))
    refused(ringkv.RingKVKeyError, "no host named 'Z'; hosts: A, B",
            lambda: router.migrate("r1", "Z"))
    refused(ringkv.RingKVKeyError, unknown, lambda: router.close("nope"))
    refused(ringkv.RingKVKeyError, unknown, lambda: router.offload("nope"))
    refused(ringkv.RingKVKeyError, unknown, lambda: router.step(["r0", "nope"]))  # r0 not stepped
    refused(ringkv.RingKVKeyError, "no paged-out session with request id 'nope'; paged out: none",
            lambda: router.page_in("nope"))
    refused(ringkv.RingKVKeyError, "no host named 'Z'; hosts: A, B", lambda: router.load("Z"))
    refused(ringkv.RingKVKeyError, "no host named 'Z'; hosts: A, B",
            lambda: router.host_died("Z"))
    assert isinstance(ringkv.RingKVKeyError("x"), KeyError)
    assert_live_once(router)

    # a paged-out request: not live, not unknown
    home = router.where["r2"]
    router.offload("r2")
    where = dict(router.where)
    away = f"request 'r2' is paged out (of host {home}); SessionRouter.page_in brings it back"
    refused(ringkv.RingKVRuntimeError, away, lambda: router.migrate("r2", "B"))
    refused(ringkv.RingKVRuntimeError, away, lambda: router.open("r2"))
    refused(ringkv.RingKVRuntimeError, away, lambda: router.step(["r2"]))
    refused(ringkv.RingKVKeyError, "no session with request id 'x'; known: r0, r1; paged out: r2",
            lambda: router.close("x"))
    refused(ringkv.RingKVRuntimeError,
            f"request 'r0' is not paged out: it is live on host {router.where['r0']}",
            lambda: router.page_in("r0"))
    assert router.page_in("r2") == home
    where = dict(router.where)

    # a host that died is not an unknown one; no alive host says so
    ray_cluster.kill(hs["B"])
    rep = router.step()
    assert set(rep.recovered) == {r for r in where if where[r] == "B"}
    where, frames = dict(router.where), dict(router.last_frame)
    with pytest.raises(rr.MigrationError, match="host B is not alive \\(alive: A\\)") as e:
        router.migrate("r0", "B")
    assert e.value.step == "reserve" and router.where == where
    assert router.open("r3") == "A"                    # A: 4 of 4 slots
    with pytest.raises(ringkv.RingKVRuntimeError) as e:
        router.open("r4")
    assert str(e.value) == "no alive host has a free session slot (A 4/4)"
    router.close("r3")
    ray_cluster.kill(hs["A"])
    rep = router.step()
    assert all(rec.host is None for rec in rep.recovered.values())   # no room: waiting
    assert router.dead == {"A", "B"} and set(router.waiting) == {"r0", "r1", "r2"}
    with pytest.raises(ringkv.RingKVRuntimeError) as e:
        router.open("new")
    assert str(e.value) == "no alive host: every host died (A, B)"
    with pytest.raises(ringkv.RingKVRuntimeError) as e:
        router.step(["r1"])
    assert str(e.value) == ("request 'r1' is waiting for room since its host A died; "
                            "SessionRouter.restore_waiting brings it back")
