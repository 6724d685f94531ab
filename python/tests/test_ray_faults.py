"""Sessions on Ray that survive faults (issue 23, docs/migration.md
"Faults"): the eight faults an outside test found, rebuilt as tests; every
named fault point of a step and of a migration (either side), where the
host raises, dies, restarts, damages a file or finds its disk full; a
router actor that dies and is rebuilt from the hosts; a second driver
sharing the placement. Each scenario ends with the shared invariant
checker (ray_invariants.Checked, through ray_cluster.checked_cluster): a
session is live on one host at a time, every frame is delivered once or
reported lost, nothing closed comes back.

Deaths are waited for through Ray (kill_and_wait, restart_and_wait, or the
router's own probe after a host's ``die`` fault point); no test sleeps."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import pytest

import ringkv
from ray_cluster import CONFIG, checked_cluster, hosts, kill_and_wait  # noqa: F401
from ray_cluster import restart_and_wait

stream = pytest.importorskip("ringkv.ray.stream", exc_type=ImportError)

RIDS = ["s0", "s1", "s2", "s3"]


@pytest.fixture
def restartable(ray_cluster, tmp_path, request):
    """Two hosts that Ray restarts when they die (max_restarts=-1)."""
    with checked_cluster(ray_cluster, request, ["A", "B"], CONFIG, tmp_path, 3,
                         max_restarts=-1) as got:
        yield got


def _opened(router, frames, rids=RIDS):
    for r in rids:
        router.open(r)
    for _ in range(frames):
        router.step()


def _other(router, rid):
    return "B" if router.where[rid] == "A" else "A"


def _stream_to(router, upto, rids=None):
    """Steps until each request delivered frame ``upto``."""
    rids = list(router.where) if rids is None else rids
    while min(router.last_frame.get(r, -1) for r in rids) < upto:
        router.step([r for r in rids if router.last_frame.get(r, -1) < upto])


# ---- the eight faults of the issue ---------------------------------------------------------

def test_fault1_closed_incarnation_never_comes_back(ray_cluster, hosts, tmp_path):
    """Close + reopen of an id, then its host dies: the new session is not
    restored from the closed one's checkpoint, even when that file is
    still there (as if its removal had failed): it is another incarnation's,
    refused; the new session is replayed from empty, nothing lost."""
    from ringkv.ray.host import checkpoint_path
    hs, router = hosts
    router.open("c")
    for _ in range(5):                                    # frames 0-4, checkpoint at 2
        router.step()
    path = checkpoint_path(str(tmp_path), "c")
    saved = open(path, "rb").read()
    old = router.incarnation("c")
    router.close("c")
    assert not os.path.exists(path)                       # retired with its incarnation
    host = router.open("c")
    assert router.incarnation("c") != old
    with open(path, "wb") as f:                           # the old file, back
        f.write(saved)
    rep = router.step()
    assert rep.results["c"]["frame"] == 0                 # a new session
    kill_and_wait(ray_cluster, hs[host])
    rec = router.step().recovered["c"]
    assert (rec.source, rec.resumed_from, rec.replayed, rec.lost_frames) == \
        ("empty", None, [0], [])
    assert f"of incarnation {old} of 'c', not the current" in rec.refused
    assert router.step().results["c"]["frame"] == 1
    _stream_to(router, 2)                                 # its own checkpoint replaces the file


@pytest.mark.parametrize("restart", [False, True], ids=["dies", "restarts"])
def test_fault2_checkpoint_saved_reply_lost(ray_cluster, tmp_path, request, restart):
    """The host saves frame 8's checkpoint and dies (or is restarted) before
    its reply: frame 8 was never delivered and is reported lost; the
    session resumes at 9 from that checkpoint. A restarted host is used
    again, empty."""
    with checked_cluster(ray_cluster, request, ["A", "B"], CONFIG, tmp_path, 3,
                         max_restarts=-1 if restart else 0) as (hs, router):
        _opened(router, 8)                                # frames 0-7; checkpoints 2, 5
        victim = router.where["s0"]
        mine = sorted(r for r in RIDS if router.where[r] == victim)
        ray_cluster.get(hs[victim].inject.remote("step.after_checkpoint", "die"))
        rep = router.step()
        assert sorted(rep.recovered) == mine
        for r in mine:
            rec = rep.recovered[r]
            assert (rec.resumed_from, rec.source, rec.replayed, rec.lost_frames) == \
                (8, "checkpoint", [], [8])
        assert sorted(rep.results) == sorted(set(RIDS) - set(mine))   # the others stepped
        assert router.dead == (set() if restart else {victim})
        rep = router.step()
        assert all(rep.results[r]["frame"] == 9 for r in mine)


def test_fault3_damaged_checkpoint_during_restore(ray_cluster, hosts):
    """A checkpoint damaged on disk, then its host dies: the restore refuses
    the file (named), the session is replayed from empty to its last
    delivered frame, nothing is lost, the step does not raise and the other
    host's results of that step are kept."""
    hs, router = hosts
    _opened(router, 6)                                    # checkpoints 2, 5
    victim = router.where["s1"]
    mine = sorted(r for r in RIDS if router.where[r] == victim)
    _stream_to(router, 7)
    ray_cluster.get(hs[victim].inject.remote("step.after_checkpoint", "corrupt"))
    router.step()                                         # frame 8: damaged checkpoints
    kill_and_wait(ray_cluster, hs[victim])
    rep = router.step()
    assert sorted(rep.results) == sorted(set(RIDS) - set(mine))
    for r in mine:
        rec = rep.recovered[r]
        assert (rec.source, rec.replayed, rec.lost_frames) == ("empty", list(range(9)), [])
        assert "corrupted data" in rec.refused
        assert router.where[r] != victim
    assert not router.waiting


def test_fault4_two_routers_and_slots_taken_outside(ray_cluster, hosts):
    """Two SessionRouters of one name are one placement: an id opened
    through both is on one host. A slot taken on a host outside the router
    counts: open picks the host with room."""
    import ringkv.ray as rr
    hs, router = hosts
    other = rr.SessionRouter(hs, name=router.name)
    for k in range(4):                                    # A full, from outside
        ray_cluster.get(hs["A"].open.remote(f"filler{k}"))
    assert router.open("x") == "B"
    assert other.open("x") == "B" and other.open("y") == "B"
    assert router.where == {"x": "B", "y": "B"}
    held = {h: sorted(v["held"]) for h, v in router.inventory().items()}
    assert held == {"A": [f"filler{k}" for k in range(4)], "B": ["x", "y"]}
    with pytest.raises(ringkv.RingKVRuntimeError,
                       match=r"no alive host has a free session slot \(A 4/4, B 4/4\)"):
        for k in range(3):
            other.open(f"z{k}")
    for k in range(2):
        router.close(f"z{k}")
    for k in range(4):
        ray_cluster.get(hs["A"].close.remote(f"filler{k}"))


def test_fault4_second_driver_shares_the_placement(ray_cluster, hosts):
    """Another driver process connected to the cluster opens the same ids
    through its own SessionRouter of the router's name, at the same time
    as this one: every id is on one host, the one both were told."""
    hs, router = hosts
    ids = [f"d{k}" for k in range(6)]
    address = ray_cluster._private.worker._global_node.address
    code = textwrap.dedent(f"""
        import json, os, ray
        from ringkv.ray import SessionRouter
        ray.init(address={address!r}, _node_ip_address="127.0.0.1", log_to_driver=False)
        r = SessionRouter(name={router.name!r})
        print(json.dumps({{i: r.open(i) for i in {ids!r}[::-1]}}))
        ray.shutdown()
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    mine = {i: router.open(i) for i in ids}
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    import json
    assert json.loads(out.strip().splitlines()[-1]) == mine
    held = [k for v in router.inventory().values() for k in v["held"]]
    assert sorted(held) == sorted(ids)                    # each once


def test_fault5_restarted_host_is_a_death(ray_cluster, restartable):
    """A host Ray restarts comes back empty under a new token: the router's
    next call to it is refused (StaleHostError), its sessions are recovered
    (onto it again when it is the least loaded) and streaming goes on."""
    hs, router = restartable
    _opened(router, 4)
    mine = sorted(r for r in RIDS if router.where[r] == "A")
    restart_and_wait(ray_cluster, hs["A"])
    rep = router.step()
    assert sorted(rep.recovered) == mine and not router.dead
    assert all(rep.recovered[r].replayed == [3] for r in mine)     # checkpoint 2, delivered 3
    assert "A" in {rep.recovered[r].host for r in mine}            # empty again: used again
    _stream_to(router, 7)


def test_fault6_page_in_after_the_host_died(ray_cluster, hosts):
    """page_in of a session whose host died: the host is marked dead, its
    live sessions are recovered, the paged-out one comes back elsewhere
    from its image (nothing lost). A host call that fails is a HostError
    (a RingKVRuntimeError) naming host, call and request."""
    hs, router = hosts
    _opened(router, 3)
    home = router.where["s2"]
    mine = sorted(r for r in RIDS if router.where[r] == home)      # s2 and its neighbour
    router.offload("s2")
    ray_cluster.get(hs[home].inject.remote("page_in", "raise"))
    with pytest.raises(ringkv.RingKVRuntimeError) as e:
        router.page_in("s2")
    from ringkv.ray import HostError
    assert isinstance(e.value, HostError)
    assert (e.value.host, e.value.call, e.value.request_id) == (home, "page_in", "s2")
    assert str(e.value).startswith(f"SessionRouter.page_in: host {home} (page_in, request "
                                   "'s2'): InjectedFailure")
    assert router.paged_out == {"s2": home}
    kill_and_wait(ray_cluster, hs[home])
    back = router.page_in("s2")
    assert back != home and router.dead == {home} and router.where["s2"] == back
    rep = router.step()                                   # reported with the next step
    assert sorted(rep.recovered) == mine
    assert rep.recovered["s2"].source == "image" and rep.recovered["s2"].lost_frames == []
    assert rep.results["s2"]["frame"] == 3
    _stream_to(router, 5)


def test_fault7_bytes_request_ids(ray_cluster, hosts):
    """A bytes id (not UTF-8) is one id with its surrogateescape str: it
    migrates (no KeyError, no slot left reserved), pages out and in, and
    comes back under the key it was opened with."""
    hs, router = hosts
    rid = b"b\xffid"
    assert router.open("b\udcffid") == router.open(rid)   # the same id
    assert list(router.where) == ["b\udcffid"]
    router.close("b\udcffid")
    router.open(rid)
    for _ in range(2):
        router.step()
    dst = _other(router, rid)
    mig = router.migrate(rid, dst)
    assert (mig.request_id, mig.destination, mig.released) == (rid, dst, True)
    assert router.where == {rid: dst}
    router.offload(rid)
    assert router.paged_out == {rid: dst}
    assert router.page_in(rid) == dst
    rep = router.step()
    assert list(rep.results) == [rid] and rep.results[rid]["frame"] == 2
    assert all(v["incoming"] == {} for v in router.inventory().values())


def test_fault8_commit_refuses_an_unverified_fill():
    """SessionHost.commit imports only a slot whose last fill verified: a
    fill refused for a digest mismatch (damaged in transit), or none, is
    refused, the slot staying reserved; a good fill then commits, and a
    damaged fill after a good one takes the verification back."""
    pytest.importorskip("xxhash")
    from ringkv.ray.host import SessionHost
    a, b = SessionHost("A", CONFIG), SessionHost("B", CONFIG)
    a.open("m")
    for _ in range(3):
        a.step(["m"])
    meta = a.meta("m")
    b.reserve(meta)
    with pytest.raises(RuntimeError, match="holds no verified copy"):
        b.commit("m", meta)                               # never filled
    meta2, digest, arrays = a.export("m")
    b.inject("fill", "corrupt")
    with pytest.raises(RuntimeError, match="arrived damaged"):
        b.fill("m", arrays, digest)
    with pytest.raises(RuntimeError, match="holds no verified copy"):
        b.commit("m", meta2)
    assert b.load()["incoming"] == 1 and b.live() == {}
    b.fill("m", arrays, digest)
    b.inject("fill", "corrupt")
    with pytest.raises(RuntimeError, match="arrived damaged"):
        b.fill("m", arrays, digest)                       # a second, damaged fill
    with pytest.raises(RuntimeError, match="holds no verified copy"):
        b.commit("m", meta2)
    b.fill("m", arrays, digest)
    assert b.commit("m", meta2) == 2
    assert b.session_digest("m") == a.session_digest("m") and b.live() == {"m": 2}


def test_step_refuses_before_any_session_steps():
    """SessionHost.step refuses a batch naming a request the host does not
    hold ("not live here") or one frozen for a migration, as a
    RingKVRuntimeError, before any session of the batch steps (the
    subtraction round had turned the first into a bare KeyError)."""
    from ringkv.errors import RingKVRuntimeError
    from ringkv.ray.host import SessionHost
    a = SessionHost("A", CONFIG)
    a.open("m")
    a.step(["m"])
    with pytest.raises(RingKVRuntimeError, match="request 'gone' is not live here"):
        a.step(["m", "gone"])
    assert a.live() == {"m": 0}
    a.export("m")                                         # frozen until committed elsewhere
    with pytest.raises(RingKVRuntimeError, match="request 'm' is frozen for a migration"):
        a.step(["m"])
    assert a.clock("m") == 0


# ---- checkpoints and their incarnations --------------------------------------------------------

def test_checkpoint_carries_request_incarnation_and_frame(tmp_path):
    """A checkpoint file says whose it is: request id and frame (the C
    writer's) and incarnation (ringkv.ray.checkpoint's metadata key), the
    header checksum recomputed so the library accepts it; a damaged byte
    is refused; a file without an incarnation (written before them) is
    refused with a message, by restore and by recover (which then starts
    empty and replays)."""
    pytest.importorskip("xxhash")
    from ringkv.ray.checkpoint import INCARNATION_KEY, read_checkpoint, tag_image
    from ringkv.ray.host import SessionHost, checkpoint_path
    h = SessionHost("A", CONFIG, str(tmp_path), 2)
    h.open("k", "00ff00ff00ff00ff")
    for _ in range(2):
        h.step(["k"])
    path = checkpoint_path(str(tmp_path), "k")
    data, info, meta = read_checkpoint(path)
    assert (info.request_id, info.last_committed, meta[INCARNATION_KEY]) == \
        ("k", 1, "00ff00ff00ff00ff")
    image = h.model.save_session_bytes(h.held["k"].slot)
    tagged = tag_image(image, {INCARNATION_KEY: "x"})
    assert ringkv.inspect_snapshot(tagged).data_xxh3 == ringkv.inspect_snapshot(image).data_xxh3
    with pytest.raises(ringkv.RingKVValueError, match="already has"):
        tag_image(tagged, {INCARNATION_KEY: "y"})
    bad = bytearray(tagged)
    bad[tagged.index(b'"ringkv_ray_incarnation":"x"') + 26] ^= 1     # the tag's value
    with pytest.raises(ValueError, match="header checksum mismatch"):
        ringkv.inspect_snapshot(bytes(bad))
    old = tmp_path / "old"
    old.mkdir()
    h.model.save_session(h.held["k"].slot, checkpoint_path(str(old), "k"))   # no incarnation
    g = SessionHost("B", CONFIG, str(old), 2)
    why = ("names no incarnation (metadata 'ringkv_ray_incarnation'): written by the library "
           "alone or before incarnations, it cannot say whose it is; refused")  # as page-in's
    with pytest.raises(ringkv.RingKVValueError, match=re.escape(why)):
        g.restore("k", checkpoint_path(str(old), "k"))
    assert g.live() == {}
    got = g.recover("k", "00ff00ff00ff00ff", 1)
    assert (got["source"], got["replayed"], got["clock"]) == ("empty", [0, 1], 1)
    assert why in got["refused"]
    assert g.session_digest("k") == h.session_digest("k")
    with pytest.raises(ringkv.RingKVValueError, match="is of request 'k', not 'j'"):
        g.restore("j", path)


def test_full_disk_keeps_the_last_checkpoint(ray_cluster, hosts, tmp_path):
    """Checkpoint writes that fail for real (the host's file size limit:
    the write fails partway into the temporary file) are reported per
    request, leave no temporary file and keep the previous checkpoint; a
    death then restores from that one and replays."""
    from ray_invariants import temp_files
    hs, router = hosts
    _opened(router, 5)                                    # checkpoints 2
    victim = router.where["s0"]
    mine = sorted(r for r in RIDS if router.where[r] == victim)
    ray_cluster.get(hs[victim].inject.remote("step.before_checkpoint", "disk_full"))
    rep = router.step()                                   # frame 5: due, fails
    assert sorted(rep.checkpoint_errors) == mine
    assert all("File too large" in rep.checkpoint_errors[r] for r in mine)
    assert not temp_files(str(tmp_path))
    assert {r: router.last_checkpoint[r] for r in mine} == {r: 2 for r in mine}
    kill_and_wait(ray_cluster, hs[victim])
    rep = router.step()
    assert all((rep.recovered[r].resumed_from, rep.recovered[r].replayed) == (2, [3, 4, 5])
               for r in mine)


def test_offload_image_says_whose_it_is(tmp_path):
    """An offload image, in memory or as a file, names (request id,
    incarnation, frame) in its snapshot header (read back from the bytes or
    the file alone, checked by the library); page-in takes only the
    incarnation that was paged out: the image of a closed incarnation (the
    same clock and data: deterministic streams) and an image naming none
    (the library's own) are refused with IncarnationError, nothing changed;
    a file that cannot be written leaves the session live."""
    pytest.importorskip("xxhash")
    from ringkv.ray.checkpoint import IncarnationError, whose
    from ringkv.ray.host import SessionHost
    h = SessionHost("A", CONFIG)
    inc1, inc2 = "1111111111111111", "2222222222222222"
    h.open("p", inc1)
    for _ in range(3):
        h.step(["p"])
    raw = h.model.save_session_bytes(h.held["p"].slot)    # the library's: no incarnation
    image, nbytes = h.offload("p")
    assert nbytes == len(image) and whose(image) == ("p", inc1, 2)
    assert ringkv.inspect_snapshot(image).data_xxh3 == ringkv.inspect_snapshot(raw).data_xxh3
    assert whose(raw) == ("p", None, 2)
    before = (h.inventory(), h.load(), h.model.offloaded_count)
    with pytest.raises(IncarnationError, match=r"host A: the image of request 'p' names no "
                       r"incarnation \(metadata 'ringkv_ray_incarnation'\).*refused, nothing"):
        h.page_in(raw)
    assert (h.inventory(), h.load(), h.model.offloaded_count) == before
    assert h.page_in(image, request_id="p", inc=inc1) == "p"
    assert h.inventory()["held"]["p"]["inc"] == inc1 and h.live() == {"p": 2}
    path = str(tmp_path / "p.safetensors")
    assert h.offload("p", path=path) == (None, os.path.getsize(path))
    assert whose(path) == ("p", inc1, 2)                  # the file alone
    for bad, why in ((tmp_path / "none.safetensors", "cannot open .*: No such file"),
                     (tmp_path, "a folder, not a regular file")):
        with pytest.raises(ringkv.RingKVOSError, match=f"inspect_snapshot: .*{why}"):
            whose(bad)                                    # the library's error, not a bare OSError
    old = open(path, "rb").read()
    assert h.page_in(path=path) == "p" and h.live() == {"p": 2}
    # closed: the reservation given up, the id opened again, streamed to the same state
    h.offload("p")
    assert h.discard("p", inc1)
    h.open("p", inc2)
    for _ in range(3):
        h.step(["p"])
    new, _ = h.offload("p")
    assert whose(new) == ("p", inc2, 2)
    assert ringkv.inspect_snapshot(new).data_xxh3 == ringkv.inspect_snapshot(old).data_xxh3
    before = (h.inventory(), h.load(), h.model.offloaded_count)
    with pytest.raises(IncarnationError, match=f"host A: the image of request 'p' is of "
                       f"incarnation {inc1}, not {inc2}; refused, nothing changed"):
        h.page_in(old)
    assert (h.inventory(), h.load(), h.model.offloaded_count) == before
    assert h.page_in(new) == "p" and h.inventory()["held"]["p"]["inc"] == inc2
    with pytest.raises(ringkv.RingKVOSError, match="does not exist"):
        h.offload("p", path=str(tmp_path / "missing" / "p.safetensors"))
    assert h.live() == {"p": 2} and h.model.offloaded_count == 0 and not h.paged
    assert h.session_digest("p") == ringkv.inspect_snapshot(new).data_xxh3


def test_region_metadata_says_whose_it_is():
    """Region metadata names (request id, incarnation, frame) in its
    snapshot header; the destination reserves and commits only the
    incarnation the metadata names (and the caller's, when named): another
    incarnation's metadata (a closed one's, the same clock) or the
    library's own (none named) is refused with IncarnationError, no slot
    reserved or state changed. ``whose`` reads the three from metadata
    alone (its header checksum checked), as from a file or image."""
    pytest.importorskip("xxhash")
    from ringkv.ray.checkpoint import INCARNATION_KEY, IncarnationError, header_metadata, whose
    from ringkv.ray.host import SessionHost
    a, b = SessionHost("A", CONFIG), SessionHost("B", CONFIG)
    inc1, inc2 = "1111111111111111", "2222222222222222"
    a.open("m", inc1)
    for _ in range(3):
        a.step(["m"])
    old = a.meta("m")
    h = header_metadata(old)
    assert (h["request_id"], h[INCARNATION_KEY], h["last_committed"]) == ("m", inc1, "2")
    raw = a.model.export_meta(a.held["m"].slot)           # the library's: no incarnation
    assert (whose(old), whose(raw)) == (("m", inc1, 2), ("m", None, 2))
    bad = bytearray(old)
    bad[old.index(b'"request_id":"m"') + 14] ^= 1          # "m" read as "l"
    with pytest.raises(ringkv.RingKVValueError, match="whose: region metadata: header checksum "
                       "mismatch"):
        whose(bytes(bad))
    with pytest.raises(ringkv.RingKVValueError, match="truncated"):
        whose(old[:-8])                                   # not metadata: the library says why
    empty = (b.inventory(), b.load())
    with pytest.raises(IncarnationError, match="region metadata of request 'm' names no "
                       "incarnation"):
        b.reserve(raw)
    with pytest.raises(IncarnationError, match=f"is of incarnation {inc1}, not {inc2}"):
        b.reserve(old, inc=inc2)
    assert (b.inventory(), b.load()) == empty             # no slot taken
    a.close("m")
    a.open("m", inc2)
    for _ in range(3):
        a.step(["m"])
    new = a.meta("m")
    assert header_metadata(new)[INCARNATION_KEY] == inc2
    with pytest.raises(IncarnationError, match=f"is of incarnation {inc1}, not {inc2}"):
        b.reserve(old, inc=inc2)                          # the closed incarnation's
    assert (b.inventory(), b.load()) == empty
    b.reserve(new, inc=inc2)
    meta, digest, arrays = a.export("m", inc=inc2)
    assert meta == new
    b.fill("m", arrays, digest, inc=inc2)
    for bad, why in ((old, f"is of incarnation {inc1}, not {inc2}"),
                     (raw, "names no incarnation")):
        with pytest.raises(IncarnationError, match=why):
            b.commit("m", bad, inc=inc2)
        assert b.inventory()["incoming"] == {"m": {"inc": inc2, "verified": True}}
    assert b.commit("m", meta, inc=inc2) == 2
    assert b.inventory()["held"]["m"]["inc"] == inc2
    assert b.session_digest("m") == a.session_digest("m")


def test_call_timeout_is_a_death_named(ray_cluster, tmp_path, request):
    """A host call that never answers (the host hangs at the offload's
    fault point, blocked until killed) counts as a death after the
    router's call_timeout_s: the host is killed and marked dead, the call
    raises HostError (a RingKVRuntimeError) naming host, call, request and
    the timeout, the session is recovered on the other host (nothing
    lost), and the invariants hold."""
    from ringkv.ray import HostError
    with checked_cluster(ray_cluster, request, ["A", "B"], CONFIG, tmp_path, 3,
                         router_kwargs={"call_timeout_s": 8.0}) as (hs, router):
        assert ray_cluster.get([h.ping.remote() for h in hs.values()]) == ["A", "B"]
        _opened(router, 4, ["t0", "t1"])                  # frames 0-3, checkpoint 2
        victim = router.where["t0"]
        mine = sorted(r for r in ["t0", "t1"] if router.where[r] == victim)
        ray_cluster.get(hs[victim].inject.remote("offload", "hang"))
        with pytest.raises(ringkv.RingKVRuntimeError) as e:
            router.offload("t0")
        assert isinstance(e.value, HostError)
        assert (e.value.host, e.value.call, e.value.request_id) == (victim, "offload", "t0")
        assert str(e.value) == (
            f"SessionRouter.offload: host {victim} (offload, request 't0'); its sessions were "
            "recovered, this one is live again elsewhere (or waiting): RuntimeError: the host "
            "died (no answer within call_timeout_s = 8 s: killed)")
        assert sorted(e.value.recovered) == mine and router.dead == {victim}
        for r in mine:
            rec = e.value.recovered[r]
            assert (rec.resumed_from, rec.replayed, rec.lost_frames) == (2, [3], [])
            assert rec.host != victim and router.where[r] == rec.host
        rep = router.step()
        assert all(rep.results[r]["frame"] == 4 for r in ["t0", "t1"])


# ---- every fault point of a step -----------------------------------------------------------------

# (point, action, what the victim's sessions show: (resumed_from, replayed, lost) of the
# recovery in the step after, or "lost" for a step that raised and frame 8 is reported
# lost by the next one). Frames 0-7 delivered, checkpoints 2 and 5 (every 3); the
# fault hits frame 8's step (its checkpoint is due).
STEP_POINTS = [
    ("step", "die", (5, [6, 7], [])),
    ("step.before_checkpoint", "die", (5, [6, 7], [])),
    ("step.after_checkpoint", "die", (8, [], [8])),
    ("step.before_reply", "die", (8, [], [8])),
    ("step.after_reply", "die", (8, [], [])),             # frame 8 delivered, then died
    ("step.before_reply", "raise", "lost"),
]


@pytest.mark.parametrize("point,how,expect", STEP_POINTS,
                         ids=[f"{p}-{h}" for p, h, _ in STEP_POINTS])
def test_step_fault_points(ray_cluster, hosts, point, how, expect):
    hs, router = hosts
    _opened(router, 8)
    victim = router.where["s3"]
    mine = sorted(r for r in RIDS if router.where[r] == victim)
    ray_cluster.get(hs[victim].inject.remote(point, how))
    if expect == "lost":
        with pytest.raises(ringkv.RingKVRuntimeError, match="injected failure") as e:
            router.step()
        assert sorted(e.value.step_report.results) == sorted(set(RIDS) - set(mine))
        rep = router.step()                               # frame 8 computed, never delivered
        assert {r: rep.lost[r] for r in mine} == {r: [8] for r in mine}
        assert all(rep.results[r]["frame"] == 9 for r in mine)
    else:
        rep = router.step()
        if point == "step.after_reply":                   # delivered; dies on the next call
            assert all(rep.results[r]["frame"] == 8 for r in mine)
            rep = router.step()
        assert sorted(rep.recovered) == mine
        for r in mine:
            rec = rep.recovered[r]
            assert (rec.resumed_from, rec.replayed, rec.lost_frames) == expect, (r, rec)
    _stream_to(router, 10)


# ---- every fault point of a migration, on either side ----------------------------------------------

# (side, point, action, and a second fault armed with it or None, the outcome:
# "src" the session stays at its source, "dst" it moved, "away" its source died and
# it was recovered elsewhere; raised: whether migrate raises MigrationError)
MIGRATION_POINTS = [
    ("src", "meta", "die", None, "away", True),
    ("dst", "reserve", "die", None, "src", True),
    ("src", "export", "die", None, "away", True),
    ("src", "export.before_reply", "die", None, "away", True),
    ("dst", "fill", "die", None, "src", True),
    ("dst", "fill.before_reply", "die", None, "src", True),
    ("dst", "commit", "die", None, "src", True),
    ("dst", "commit.before_reply", "raise", None, "dst", False),   # imported, reply lost
    ("dst", "commit.before_reply", "die", None, "src", True),
    ("src", "release", "raise", None, "dst", False),
    ("src", "release", "die", None, "dst", False),
    ("src", "release.before_reply", "raise", None, "dst", False),
    ("dst", "cancel", "raise", ("dst", "fill", "raise"), "src", True),
    ("dst", "cancel", "die", ("dst", "fill", "raise"), "src", True),
    ("src", "thaw", "raise", ("dst", "fill", "raise"), "src", True),
    ("src", "thaw", "die", ("dst", "fill", "raise"), "away", True),
    ("src", "thaw", "die", ("dst", "fill.before_reply", "raise"), "dst", False),
]


@pytest.mark.parametrize("side,point,how,also,outcome,raised", MIGRATION_POINTS,
                         ids=[f"{s}-{p}-{h}" + (f"+{a[1]}" if a else "")
                              for s, p, h, a, _, _ in MIGRATION_POINTS])
def test_migration_fault_points(ray_cluster, hosts, side, point, how, also, outcome, raised):
    import ringkv.ray as rr
    hs, router = hosts
    _opened(router, 4)                                    # checkpoint 2, delivered 3
    rid = "s1"
    src = router.where[rid]
    dst = _other(router, rid)
    end = {"src": src, "dst": dst}
    for s, p, h in [(side, point, how)] + ([also] if also else []):
        ray_cluster.get(hs[end[s]].inject.remote(p, h))
    if raised:
        with pytest.raises(rr.MigrationError) as e:
            router.migrate(rid, dst)
        recovered = e.value.recovered
    else:
        mig = router.migrate(rid, dst)
        recovered = mig.recovered
        assert mig.released == (point not in ("release", "release.before_reply") and
                                src not in router.dead)
    where = router.where.get(rid)
    if outcome == "away":
        assert recovered[rid].lost_frames == [] and recovered[rid].replayed == [3]
        assert where == dst and router.dead == {src}
    else:
        assert where == end[outcome]
    assert router.release_stale() == {}
    rep = router.step()
    assert rep.results[rid]["frame"] == 4                 # nothing lost, nothing twice
    _stream_to(router, 6)


# ---- the router itself ------------------------------------------------------------------------------

def test_router_restarts_and_rebuilds_from_the_hosts(ray_cluster, hosts):
    """The router actor dies: Ray restarts it and it rebuilds its placement
    from the hosts (ids, incarnations, last delivered frames: nothing
    lost); a paged-out session whose image died with it comes back from
    its checkpoint, replayed. Killed for good, a new one of the name is
    created by the next call and rebuilds the same way."""
    hs, router = hosts
    _opened(router, 4)
    router.offload("s2")
    before = (router.where, router.incarnations, router.last_frame, router.paged_out)
    restart_and_wait(ray_cluster, router.core)            # Ray restarts it
    assert (router.where, router.incarnations, router.last_frame, router.paged_out) == before
    rep = router.step()
    assert {r: rep.results[r]["frame"] for r in rep.results} == \
        {r: 4 for r in RIDS if r != "s2"}
    assert router.page_in("s2") in ("A", "B")
    rep = router.step()
    assert rep.recovered["s2"].source == "checkpoint" and rep.recovered["s2"].replayed == [3]
    assert rep.results["s2"]["frame"] == 4
    router.shutdown()                                     # for good
    import ringkv.ray as rr
    with pytest.raises(rr.RouterRestartedError):
        router.step()
    rep = router.step()
    assert all(rep.results[r]["frame"] == 6 - (r == "s2") for r in RIDS)
