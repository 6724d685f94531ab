"""ringkv on a real local Ray cluster (issue 13): hosts on loopback only,
placement on the least-loaded host with affinity, 4 sessions streaming
deterministic tokens through the 4+1 schedule on 2 hosts exactly as each
would alone, and a host killed mid-stream whose sessions resume on the
other from their last checkpoint, replayed to their last delivered frame
(nothing delivered twice, nothing lost).
Checkpoint file names of every valid request id, a failed checkpoint and a
host that raises in a step leave the bookkeeping consistent (trial 2, P2).
Migration: test_migration.py; offload: test_offload.py."""
from __future__ import annotations

import hashlib
import os

import pytest

from ray_cluster import CONFIG, assert_live_once, cluster_pids, hosts, is_loopback  # noqa: F401
from ray_cluster import kill_and_wait, listening_addresses, _children

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
    kill_and_wait(ray_cluster, hs["A"])                           # mid-stream, no warning
    rep = router.step()
    assert sorted(rep.recovered) == victims
    for r in victims:          # checkpoint 5, frame 6 delivered: replayed, not lost
        rec = rep.recovered[r]
        assert (rec.dead_host, rec.host, rec.resumed_from, rec.replayed, rec.lost_frames) == \
            ("A", "B", 5, [6], [])
    survivors = [r for r in RIDS if r not in victims]
    assert sorted(rep.results) == sorted(survivors)     # stepped on: frame 7
    assert all(rep.results[r]["frame"] == 7 for r in survivors)
    assert router.dead == {"A"} and all(router.where[r] == "B" for r in RIDS)
    assert_live_once(router)
    # the victims go on at frame 7 (6 was delivered: not again), bit for bit
    rep = router.step(victims)
    assert {r: rep.results[r]["frame"] for r in victims} == {r: 7 for r in victims}
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

    def refused(method, cls, text, call):  # messages name the call made (P7 of trial 2)
        with pytest.raises(cls) as e:
            call()
        assert str(e.value) == f"SessionRouter.{method}: {text}"
        assert router.where == where and router.last_frame == frames and not router.dead

    unknown = "no session with request id 'nope'; known: r0, r1, r2"
    refused("migrate", ringkv.RingKVKeyError, unknown, lambda: router.migrate("nope", "B"))
    refused("migrate", ringkv.RingKVKeyError, "no host named 'Z'; hosts: A, B",
            lambda: router.migrate("r1", "Z"))
    refused("close", ringkv.RingKVKeyError, unknown, lambda: router.close("nope"))
    refused("offload", ringkv.RingKVKeyError, unknown, lambda: router.offload("nope"))
    refused("step", ringkv.RingKVKeyError, unknown,
            lambda: router.step(["r0", "nope"]))  # r0 not stepped
    refused("page_in", ringkv.RingKVKeyError,
            "no paged-out session with request id 'nope'; paged out: none",
            lambda: router.page_in("nope"))
    refused("load", ringkv.RingKVKeyError, "no host named 'Z'; hosts: A, B",
            lambda: router.load("Z"))
    refused("host_died", ringkv.RingKVKeyError, "no host named 'Z'; hosts: A, B",
            lambda: router.host_died("Z"))
    assert isinstance(ringkv.RingKVKeyError("x"), KeyError)
    assert_live_once(router)

    # a paged-out request: not live, not unknown
    home = router.where["r2"]
    router.offload("r2")
    where = dict(router.where)
    away = f"request 'r2' is paged out (of host {home}); SessionRouter.page_in brings it back"
    refused("migrate", ringkv.RingKVRuntimeError, away, lambda: router.migrate("r2", "B"))
    refused("open", ringkv.RingKVRuntimeError, away, lambda: router.open("r2"))
    refused("step", ringkv.RingKVRuntimeError, away, lambda: router.step(["r2"]))
    refused("close", ringkv.RingKVKeyError,
            "no session with request id 'x'; known: r0, r1; paged out: r2",
            lambda: router.close("x"))
    refused("page_in", ringkv.RingKVRuntimeError,
            f"request 'r0' is not paged out: it is live on host {router.where['r0']}",
            lambda: router.page_in("r0"))
    assert router.page_in("r2") == home
    where = dict(router.where)

    # a host that died is not an unknown one; no alive host says so
    kill_and_wait(ray_cluster, hs["B"])
    rep = router.step()
    assert set(rep.recovered) == {r for r in where if where[r] == "B"}
    where, frames = dict(router.where), dict(router.last_frame)
    with pytest.raises(rr.MigrationError, match="host B is not alive \\(alive: A\\)") as e:
        router.migrate("r0", "B")
    assert e.value.step == "reserve" and router.where == where
    assert router.open("r3") == "A"                    # A: 4 of 4 slots
    with pytest.raises(ringkv.RingKVRuntimeError) as e:
        router.open("r4")
    assert str(e.value) == "SessionRouter.open: no alive host has a free session slot (A 4/4)"
    router.close("r3")
    kill_and_wait(ray_cluster, hs["A"])
    rep = router.step()
    assert all(rec.host is None for rec in rep.recovered.values())   # no room: waiting
    assert router.dead == {"A", "B"} and set(router.waiting) == {"r0", "r1", "r2"}
    with pytest.raises(ringkv.RingKVRuntimeError) as e:
        router.open("new")
    assert str(e.value) == "SessionRouter.open: no alive host: every host died (A, B)"
    with pytest.raises(ringkv.RingKVRuntimeError) as e:
        router.step(["r1"])
    assert str(e.value) == ("SessionRouter.step: request 'r1' is waiting for room since its "
                            "host A died; "
                            "SessionRouter.restore_waiting brings it back")


# ---- checkpoint file names (trial 2, P2) -----------------------------------------------

LONG_IDS = ["x" * 250, "é" * 127, "a" + "é" * 127, b"\xff" * 255, "r" * 232]


def test_checkpoint_names_fit_every_valid_id(tmp_path):
    """checkpoint_path: short ids keep the quoted name of earlier versions
    (old checkpoints load); every id ringkv accepts (up to 255 bytes,
    quoting can triple it) gets a name that fits with the atomic save's
    temporary suffix; long names are stable and distinct."""
    import re
    from ringkv.ray.host import CHECKPOINT_NAME_MAX, checkpoint_path
    name = lambda rid: os.path.basename(checkpoint_path(str(tmp_path), rid))  # noqa: E731
    assert CHECKPOINT_NAME_MAX == 244
    assert name("r0") == "r0.safetensors"                      # as before
    assert name("a/b é") == "a%2Fb%20%C3%A9.safetensors"
    assert name("\udcff") == name(b"\xff") == "%FF.safetensors"  # surrogateescape = its byte
    assert name("r" * 232) == "r" * 232 + ".safetensors"       # 244: still the quoted name
    assert name("r" * 233) == "r" * 96 + "%_" + hashlib.sha256(b"r" * 233).hexdigest() + \
        ".safetensors"
    # pinned: the name must not change between versions
    assert name("x" * 250) == ("x" * 96 + "%_086d4a1c293bde318dc1fec9a21b9d828ba7637bcbdc5cdb4"
                               "2662fd84b733e9f.safetensors")
    names = {name(r) for r in LONG_IDS} | {name("x" * 249), name("x" * 250 + "y")}
    assert len(names) == len(LONG_IDS) + 2                      # a shared prefix, other hashes
    for n in names:
        assert len(n) <= CHECKPOINT_NAME_MAX, n
        if "%_" in n:                                          # the prefix: whole %XX escapes
            assert re.fullmatch(r"([A-Za-z0-9_.~-]|%[0-9A-F]{2})*", n.split("%_")[0]), n
    # 96 would split the 32nd escape: cut before it (at 94)
    assert name("a" + "é" * 127).split("%_")[0] == "a" + "%C3%A9" * 15 + "%C3"


def test_long_ids_checkpoint_and_restore(tmp_path):
    """A SessionHost (no Ray) checkpoints sessions of 250-255-byte ids every
    frame; a second host restores each file bit-exact at its clock."""
    from ringkv.ray.host import SessionHost, checkpoint_path, request_key
    a = SessionHost("A", CONFIG, str(tmp_path), 1)
    b = SessionHost("B", CONFIG, str(tmp_path), 1)
    rids = LONG_IDS[:4]
    for r in rids:
        a.open(r)
    for f in range(2):
        got = a.step(rids)                       # keyed by the str form of each id
        assert {r: (v["frame"], v["checkpoint"], v["checkpoint_error"]) for r, v in got.items()} \
            == {request_key(r): (f, f, None) for r in rids}
    for r in rids:
        assert b.restore(r, checkpoint_path(str(tmp_path), r)) == 1
        assert b.session_digest(r) == a.session_digest(r)


def test_failed_checkpoint_is_reported_not_raised(tmp_path):
    """A checkpoint that cannot be written (its folder is gone) does not
    fail the step after the frame was computed: the frame is reported, the
    error named, the clock and the previous checkpoint file consistent."""
    import ringkv
    from ringkv.ray.host import SessionHost, checkpoint_path
    h = SessionHost("A", CONFIG, str(tmp_path), 1)
    h.open("r0")
    assert h.step(["r0"])["r0"]["checkpoint"] == 0
    h.checkpoint_dir = str(tmp_path / "gone")
    got = h.step(["r0"])["r0"]
    assert (got["frame"], got["checkpoint"]) == (1, None)
    assert got["checkpoint_error"].startswith("RingKVOSError: write_atomic: cannot save")
    assert f"folder '{tmp_path / 'gone'}': does not exist" in got["checkpoint_error"]
    assert h.live() == {"r0": 1}
    assert ringkv.inspect_snapshot(checkpoint_path(str(tmp_path), "r0")).last_committed == 0
    assert not (tmp_path / "gone").exists()


def test_router_step_keeps_other_hosts_results(ray_cluster, hosts):
    """A host that raises in SessionRouter.step (not dead) does not lose
    the others' results: they are recorded, then its error is raised with
    the report. A long id checkpoints through the router and a dead host's
    long-id session resumes from its checkpoint."""
    hs, router = hosts
    long_id = "é" * 120                                  # 240 bytes, 720 quoted characters
    rids = [long_id, "r1", "r2", "r3"]
    for r in rids:
        router.open(r)
    for _ in range(3):                                   # checkpoint after frame 2
        rep = router.step()
        assert not rep.checkpoint_errors
    assert router.last_checkpoint == {r: 2 for r in rids}
    bad = router.where["r1"]
    good = sorted(r for r in rids if router.where[r] != bad)
    ray_cluster.get(hs[bad].inject.remote("step", "raise"))
    with pytest.raises(Exception, match="injected failure in step") as e:
        router.step()
    assert sorted(e.value.step_report.results) == good
    others = sorted({router.where[r] for r in good})     # hosts, not request ids
    assert (f"host(s) {bad} raised; the results of the other hosts ({', '.join(others)}) "
            "are recorded") in " ".join(getattr(e.value, "__notes__", []))
    assert {r: router.last_frame[r] for r in rids} == \
        {r: 3 if r in good else 2 for r in rids}
    victim = router.where[long_id]
    kill_and_wait(ray_cluster, hs[victim])
    rep = router.step()
    rec = rep.recovered[long_id]
    assert (rec.resumed_from, rec.host) == (2, next(h for h in hs if h != victim))
    assert (rec.replayed, rec.lost_frames) == ([3] if victim != bad else [], [])
