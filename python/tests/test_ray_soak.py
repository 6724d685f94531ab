"""A randomized soak of ringkv.ray under faults (issue 23): 3 hosts on
loopback (Ray restarts one that dies), 12 sessions, 300 steps, at most 30
faults drawn from the named fault points (a step's, either side of a
migration's) and from outside (a host or the router actor restarted, a
checkpoint file damaged, a paged-out session's host restarted), with
migrations, page-outs and page-ins, closes and reopens in between. Seeded
(RKV_SOAK_SEED, default 23) and bounded in steps, not in time (about 3
minutes on an idle 2-core machine). Every call goes through the shared
invariant checker (ray_invariants: each result as it comes, placement
after every call), the whole state is checked every 25 steps and at the
end. RKV_SOAK_STEPS / RKV_SOAK_FAULTS shorten it for a quick look."""
from __future__ import annotations

import collections
import os
import random
import shutil
import tempfile

import pytest

import ringkv
from ray_cluster import checked_cluster, restart_and_wait

pytest.importorskip("ringkv.ray.stream", exc_type=ImportError)

SEED = int(os.environ.get("RKV_SOAK_SEED", "23"))
STEPS = int(os.environ.get("RKV_SOAK_STEPS", "300"))
FAULTS = int(os.environ.get("RKV_SOAK_FAULTS", "30"))
SESSIONS = 12
CONFIG = ringkv.preset("demo", num_sessions=6)   # 3 hosts x 6: room after any one dies

# fault points reached by the next step: (point, action)
STEP_FAULTS = [("step", "die"), ("step.before_checkpoint", "die"),
               ("step.after_checkpoint", "die"), ("step.before_reply", "die"),
               ("step.before_reply", "raise"), ("step.after_reply", "die"),
               ("step.after_checkpoint", "corrupt"), ("step.before_checkpoint", "disk_full")]
# fault points reached by a migration: (side, point, action, a second fault or None)
MIGRATION_FAULTS = [
    ("src", "meta", "die", None), ("dst", "reserve", "die", None),
    ("src", "export", "die", None), ("dst", "fill", "die", None),
    ("dst", "fill", "corrupt", None), ("dst", "fill.before_reply", "die", None),
    ("dst", "commit", "raise", None), ("dst", "commit", "die", None),
    ("dst", "commit.before_reply", "raise", None), ("dst", "commit.before_reply", "die", None),
    ("src", "release", "die", None), ("src", "release.before_reply", "raise", None),
    ("dst", "cancel", "raise", ("dst", "fill", "raise")),
    ("dst", "cancel", "die", ("dst", "fill", "raise")),
    ("src", "thaw", "raise", ("dst", "fill", "raise")),
    ("src", "thaw", "die", ("dst", "fill", "raise"))]
OUTSIDE = ["restart_host", "damage_then_restart", "restart_router", "page_in_after_restart"]


def test_soak(ray_cluster, request):
    import ringkv.ray as rr
    from ringkv.ray.host import checkpoint_path
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None   # fsyncs cost nothing there
    folder = tempfile.mkdtemp(prefix="rkv-soak-", dir=shm)
    rng = random.Random(SEED)
    counts: collections.Counter = collections.Counter()
    try:
        with checked_cluster(ray_cluster, request, ["A", "B", "C"], CONFIG, folder, 3,
                             max_restarts=-1) as (hs, router):
            rids = [f"q{i}" for i in range(SESSIONS)]
            for r in rids:
                router.open(r)

            def live():
                return sorted(router.where, key=str)

            def attempt(call, *args):
                """A call a fault may make fail in its documented ways."""
                try:
                    return call(*args)
                except (rr.MigrationError, rr.HostError) as exc:
                    counts[f"raised {type(exc).__name__}"] += 1
                    return None

            def migrate_with(side, point, how, also):
                rid = rng.choice(live())
                src = router.where[rid]
                dst = rng.choice([h for h in router.alive() if h != src])
                end = {"src": src, "dst": dst}
                for s, p, h in [(side, point, how)] + ([also] if also else []):
                    ray_cluster.get(hs[end[s]].inject.remote(p, h))
                attempt(router.migrate, rid, dst)

            faults = 0
            for n in range(STEPS):
                if faults < FAULTS and rng.random() < 1.5 * FAULTS / STEPS:
                    faults += 1
                    kind = rng.choice(["step"] * 3 + ["migration"] * 3 + ["outside"] * 2)
                    if kind == "step":
                        point, how = rng.choice(STEP_FAULTS)
                        host = rng.choice(router.alive())
                        ray_cluster.get(hs[host].inject.remote(point, how))
                        counts[f"{point} {how}"] += 1
                    elif kind == "migration":
                        f = rng.choice(MIGRATION_FAULTS)
                        migrate_with(*f)
                        counts[f"{f[0]} {f[1]} {f[2]}"] += 1
                    else:
                        what = rng.choice(OUTSIDE)
                        counts[what] += 1
                        if what == "restart_host":
                            restart_and_wait(ray_cluster, hs[rng.choice(router.alive())])
                        elif what == "damage_then_restart":
                            rid = rng.choice(live())
                            path = checkpoint_path(folder, rid)
                            if os.path.exists(path):
                                with open(path, "r+b") as fh:
                                    fh.seek(-1, os.SEEK_END)
                                    b = fh.read(1)
                                    fh.seek(-1, os.SEEK_END)
                                    fh.write(bytes([b[0] ^ 1]))
                            restart_and_wait(ray_cluster, hs[router.where[rid]])
                        elif what == "restart_router":
                            restart_and_wait(ray_cluster, router.core)
                        else:
                            rid = rng.choice(live())
                            home = router.where[rid]
                            if attempt(router.offload, rid) is not None:
                                restart_and_wait(ray_cluster, hs[home])
                                router.page_in(rid)
                op = rng.random()
                if op < 0.06 and len(router.alive()) > 1:
                    rid = rng.choice(live())
                    dst = rng.choice([h for h in router.alive() if h != router.where[rid]])
                    attempt(router.migrate, rid, dst)
                    counts["migrate"] += 1
                elif op < 0.09 and len(router.paged_out) < 2:
                    attempt(router.offload, rng.choice(live()))
                    counts["offload"] += 1
                elif op < 0.12 and router.paged_out:
                    attempt(router.page_in, rng.choice(sorted(router.paged_out, key=str)))
                    counts["page_in"] += 1
                elif op < 0.14:
                    rid = rng.choice(live())
                    router.close(rid)
                    router.open(rid)
                    counts["close+reopen"] += 1
                attempt(router.step)
                if n % 25 == 24:
                    router.check()
            for rid in sorted(router.paged_out, key=str):
                attempt(router.page_in, rid)
            router.restore_waiting()
            router.step()
            router.step()
            lost = sum(len(r.lost_frames) for r in router.recoveries)
            replayed = sum(len(r.replayed) for r in router.recoveries)
            print(f"soak seed {SEED}: {STEPS} steps, {faults} faults, "
                  f"{len(router.recoveries)} recoveries ({replayed} frames replayed, "
                  f"{lost} reported lost); {dict(sorted(counts.items()))}")
            assert faults <= FAULTS and router.recoveries
            # the final check: checked_cluster runs router.check() on the way out
    finally:
        shutil.rmtree(folder, ignore_errors=True)
