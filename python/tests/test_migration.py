"""Moving live sessions between Ray hosts (issue 13): a session migrated
mid-stream goes on exactly as if it never moved; a migration that fails at
any step (the metadata, the reservation, the export, the transfer, the
verification, the import) leaves it live and unchanged at its source; a
destination without room refuses before the source gives anything up; a
session is never live on two hosts; a destination that dies mid-migration
leaves the session at the source, and a source that dies after the import
leaves it at the destination."""
from __future__ import annotations

import pytest

from ray_cluster import CONFIG, assert_live_once, hosts  # noqa: F401

stream = pytest.importorskip("ringkv.ray.stream", exc_type=ImportError)

RIDS = ["m0", "m1", "m2", "m3"]


@pytest.fixture(scope="module")
def reference():
    return {r: stream.reference_digests(CONFIG, r, 10) for r in RIDS}


def _opened(router, frames):
    for r in RIDS:
        router.open(r)
    for _ in range(frames):
        router.step()


def _ends(router, rid):
    """The session's host and the other one."""
    src = router.where[rid]
    return src, "B" if src == "A" else "A"


def _check_steps(router, reference, rids, upto):
    """Steps ``rids`` until each has done frame ``upto``, every digest
    equal to the never-moved stream's."""
    while min(router.last_frame[r] for r in rids) < upto:
        for r, res in router.step([r for r in rids if router.last_frame[r] < upto]).results.items():
            assert res["digest"] == reference[r][res["frame"]], (r, res["frame"])


def test_migrated_session_matches_unmigrated(ray_cluster, hosts, reference):
    import ringkv.ray as rr
    hs, router = hosts
    _opened(router, 4)
    rid = "m1"
    src, dst = _ends(router, rid)
    before = ray_cluster.get(hs[src].session_digest.remote(rid))
    mig = router.migrate(rid, dst)
    assert isinstance(mig, rr.Migration)
    assert (mig.source, mig.destination, mig.clock, mig.released) == (src, dst, 3, True)
    per_session = 2 * 2 * (17 * 128) * 64 * 4 + 2 * 17 * 128  # K, V and bits of 2 layers
    assert mig.bytes == per_session and mig.pause_s > 0
    assert router.where[rid] == dst
    assert ray_cluster.get(hs[dst].session_digest.remote(rid)) == before
    assert_live_once(router)
    _check_steps(router, reference, RIDS, 9)


# (which host fails, in which step, how, the step MigrationError names)
FAILURES = [("src", "meta", "raise", "meta"),
            ("dst", "reserve", "raise", "reserve"),
            ("src", "export", "raise", "export"),
            ("dst", "fill", "raise", "fill"),
            ("dst", "fill", "corrupt", "fill"),       # damaged in transit: digests differ
            ("dst", "commit", "raise", "commit")]


def test_failed_migration_leaves_session_at_source(ray_cluster, hosts, reference):
    """Each failure in turn (then the same migration again, which works and
    moves the session, so the next failure goes the other way)."""
    import ringkv.ray as rr
    hs, router = hosts
    _opened(router, 1)
    rid = "m2"
    for k, (host_side, step, how, expect) in enumerate(FAILURES):
        src, dst = _ends(router, rid)
        before = ray_cluster.get(hs[src].session_digest.remote(rid))
        clock = ray_cluster.get(hs[src].clock.remote(rid))
        load_dst = ray_cluster.get(hs[dst].load.remote())
        ray_cluster.get(hs[src if host_side == "src" else dst].inject.remote(step, how))
        with pytest.raises(rr.MigrationError) as e:
            router.migrate(rid, dst)
        assert (e.value.step, e.value.source, e.value.recovered) == (expect, src, {}), k
        if how == "corrupt":
            assert "damaged" in str(e.value)
        assert router.where[rid] == src
        assert ray_cluster.get(hs[src].session_digest.remote(rid)) == before, k
        assert ray_cluster.get(hs[src].clock.remote(rid)) == clock == k
        assert ray_cluster.get(hs[dst].load.remote()) == load_dst, k  # reservation gone
        assert_live_once(router)
        _check_steps(router, reference, RIDS, k + 1)  # it streams on, unchanged
        router.migrate(rid, dst)                       # the same move again works
        assert router.where[rid] == dst
        assert_live_once(router)


def test_destination_without_room_refuses_first(ray_cluster, hosts, reference):
    import ringkv.ray as rr
    hs, router = hosts
    _opened(router, 2)
    rid = "m0"
    src, dst = _ends(router, rid)
    for k in range(2):                                  # fill the destination up
        ray_cluster.get(hs[dst].open.remote(f"filler{k}"))
    with pytest.raises(rr.MigrationError) as e:
        router.migrate(rid, dst)
    assert e.value.step == "reserve" and "RKV_ERR_FULL" in str(e.value)
    src_load = ray_cluster.get(hs[src].load.remote())
    assert src_load["frozen"] == 0 and src_load["live"] == 2   # nothing was given up
    assert router.where[rid] == src
    _check_steps(router, reference, RIDS, 4)


def test_destination_dies_mid_migration(ray_cluster, hosts, reference):
    import ringkv.ray as rr
    hs, router = hosts
    _opened(router, 4)                                  # checkpoints at frame 2
    rid = "m3"
    src, dst = _ends(router, rid)
    before = ray_cluster.get(hs[src].session_digest.remote(rid))
    ray_cluster.get(hs[dst].inject.remote("fill", "die"))
    with pytest.raises(rr.MigrationError) as e:
        router.migrate(rid, dst)
    assert e.value.step == "fill"
    assert router.dead == {dst}
    assert router.where[rid] == src                     # the migrating one stayed, unchanged
    assert ray_cluster.get(hs[src].session_digest.remote(rid)) == before
    victims = sorted(e.value.recovered)                 # the dead host's own sessions
    assert len(victims) == 2 and all(router.where[v] == src for v in victims)
    assert all((e.value.recovered[v].replayed, e.value.recovered[v].lost_frames) == ([3], [])
               for v in victims)                # checkpoint 2, frame 3 delivered: replayed
    assert_live_once(router)
    _check_steps(router, reference, RIDS, 6)


def test_source_dies_after_the_import(ray_cluster, hosts, reference):
    hs, router = hosts
    _opened(router, 4)
    rid = "m1"
    src, dst = _ends(router, rid)
    ray_cluster.get(hs[src].inject.remote("release", "die"))
    mig = router.migrate(rid, dst)                      # imported, then the source died
    assert mig.released is False and router.where[rid] == dst
    assert router.dead == {src} and sorted(mig.recovered) == sorted(
        r for r in RIDS if r != rid and r in mig.recovered)
    assert len(mig.recovered) == 1                      # the source's other session
    assert_live_once(router)
    _check_steps(router, reference, RIDS, 6)            # the moved one lost nothing
