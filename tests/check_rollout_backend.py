#!/usr/bin/env python3
"""`--backend cuda` of `ringkv rollout` and `ringkv bench`: one model on either
backend (issue 11), refused cleanly where it cannot run.

usage: check_rollout_backend.py RINGKV BUILT_WITH_CUDA(0|1) [--no-bench] [--image PATH]

- Built without CUDA (0): both commands exit 2 and say "ringkv was built
  without CUDA"; that line is all they print (bench says nothing about its
  CPU rows' OpenBLAS peer first).
- Built with CUDA (1) on a machine without a GPU: both exit 2 (refused
  before any work, README "Exit status") saying there is no GPU ("the CUDA
  runtime sees 0 device(s)") in the command's terms (no library function
  name), nothing on stdout, and one line on stderr: the refusal.
- Built with CUDA on a machine with a GPU (scripts/gpu_check.sh runs this):
  - a 40-frame rollout on the GPU (each frame one CUDA graph replay but the
    last) reports last_frame 39, a 16-digit XXH3-64 digest, the GPU's
    attention plans and the recall pattern of the rings on the first local
    layer (near recalled, docs/rollout.md);
  - the same run pass by pass (RKV_ROLLOUT_GRAPH=0) gives the same digest
    and recall figures: replaying the recorded frame is the same work (f32,
    the generic kernel; and bf16 with 2 sessions, the tensor-core kernel);
  - snapshots cross backends: session 0 saved on the GPU after 20 frames is
    byte-identical to the file the CPU saves at the same frame (the rings
    hold the same bytes; only attention outputs differ between backends),
    and the CPU resuming the GPU's file for 20 frames ends with the digest
    of an uninterrupted 40-frame CPU run; the GPU resuming the CPU's file
    ends with the digest of the uninterrupted GPU run;
  - `bench --backend cuda --quick --json` prints rows, among them
    cuda_attention_tflops, cuda_upsert_us and cuda_frame_ms with the card
    (not with --no-bench: scripts/gpu_check.sh runs the full bench next).
- Every build: the CPU's replay path (RKV_ROLLOUT_GRAPH=1, device.h's
  stand-in for a graph: the recorded calls made again) reports the same
  digest, recall figures and picture frames as pass by pass; `--backend`
  with another name exits 2.
Python standard library only.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

NO_CUDA = "ringkv was built without CUDA: rebuild with nvcc on PATH"
NO_GPU = "the CUDA runtime sees 0 device(s)"
# What two runs of the same frames must share (timings and paths aside).
SAME_KEYS = ("last_frame", "output_digest", "recall_rate", "recall_psnr_db", "recall_patches",
             "patches", "camera_frames", "picture_frames")


def run(cmd, env=None):
    print("running:", " ".join(cmd), f"({env})" if env else "", flush=True)
    full = dict(os.environ, **env) if env else None
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=full)


def rollout(ringkv, out, args, failures, name, env=None):
    p = run([ringkv, "rollout", "--json", "--out", out] + args, env)
    if p.returncode != 0:
        failures.append(f"{name}: status {p.returncode}, stderr {p.stderr.strip()[-2000:]!r}")
        return None
    return json.loads(p.stdout)


def same(a, b, what, failures):
    if a is None or b is None:
        return
    for k in SAME_KEYS:
        if a.get(k) != b.get(k):
            failures.append(f"{what}: {k} differs: {a.get(k)!r} vs {b.get(k)!r}")
            return
    print(f"  {what}: same digest {a.get('output_digest')} and figures")


def gpu_checks(ringkv, extra, tmp, failures, b):
    """The GPU's checks; b: the finished `bench --backend cuda --quick --json`
    run, or None (--no-bench)."""
    out = os.path.join(tmp, "out")
    g = rollout(ringkv, out, ["--backend", "cuda", "--frames", "40"] + extra, failures,
                "rollout on the GPU")
    if g is not None:
        if g.get("last_frame") != 39:
            failures.append(f"rollout on the GPU: last_frame {g.get('last_frame')}")
        if not re.fullmatch(r"[0-9a-f]{16}", str(g.get("output_digest"))):
            failures.append(f"rollout on the GPU: output_digest {g.get('output_digest')!r}")
        plans = g.get("attention_plans") or {}
        if g.get("isa") is not None or not plans or any(v.startswith("?") or "rkv_" in v
                                                        for v in plans.values()):
            failures.append(f"rollout on the GPU: isa {g.get('isa')!r} (expected null), "
                            f"attention_plans {plans!r}")
        near = g["recall_rate"]["local"]["near"]
        if near is None or near < 0.9:
            failures.append(f"rollout on the GPU: local near recall {near} < 0.9")
        print(f"  rollout on the GPU: digest {g.get('output_digest')}, local near {near}, "
              f"plans {plans}")
    e = rollout(ringkv, out, ["--backend", "cuda", "--frames", "40"] + extra, failures,
                "rollout on the GPU pass by pass", {"RKV_ROLLOUT_GRAPH": "0"})
    same(g, e, "GPU: graph replays vs pass by pass", failures)
    # bf16: the tensor-core kernel with key splits, in the graph and out of it
    bf = ["--backend", "cuda", "--frames", "20", "--dtype", "bf16", "--sessions", "2"] + extra
    same(rollout(ringkv, out, bf, failures, "GPU bf16"),
         rollout(ringkv, out, bf, failures, "GPU bf16 pass by pass", {"RKV_ROLLOUT_GRAPH": "0"}),
         "GPU bf16: graph replays vs pass by pass", failures)

    snap_g, snap_c = os.path.join(tmp, "gpu.safetensors"), os.path.join(tmp, "cpu.safetensors")
    rollout(ringkv, out, ["--backend", "cuda", "--frames", "20", "--snapshot-out", snap_g] + extra,
            failures, "GPU: save after 20 frames")
    rollout(ringkv, out, ["--frames", "20", "--snapshot-out", snap_c] + extra, failures,
            "CPU: save after 20 frames")
    if os.path.exists(snap_g) and os.path.exists(snap_c):
        with open(snap_g, "rb") as fg, open(snap_c, "rb") as fc:
            bg, bc = fg.read(), fc.read()
        if bg != bc:
            i = next((k for k in range(min(len(bg), len(bc))) if bg[k] != bc[k]),
                     min(len(bg), len(bc)))
            failures.append(f"the GPU's and the CPU's snapshot after 20 frames differ first at "
                            f"byte {i} of {len(bg)} / {len(bc)}")
        else:
            print(f"  snapshots after 20 frames: byte-identical on both backends ({len(bg)} bytes)")
    c40 = rollout(ringkv, out, ["--frames", "40"] + extra, failures, "CPU: 40 frames")
    c_res = rollout(ringkv, out, ["--resume", snap_g, "--frames", "20"] + extra, failures,
                    "CPU: resume the GPU's snapshot")
    if c40 and c_res and c40.get("output_digest") != c_res.get("output_digest"):
        failures.append(f"the CPU resuming the GPU's snapshot: digest {c_res.get('output_digest')}"
                        f", uninterrupted CPU run {c40.get('output_digest')}")
    g_res = rollout(ringkv, out, ["--backend", "cuda", "--resume", snap_c, "--frames", "20"] + extra,
                    failures, "GPU: resume the CPU's snapshot")
    if g and g_res and g.get("output_digest") != g_res.get("output_digest"):
        failures.append(f"the GPU resuming the CPU's snapshot: digest {g_res.get('output_digest')}"
                        f", uninterrupted GPU run {g.get('output_digest')}")
    elif g and g_res:
        print("  resumed across backends: the digests of uninterrupted runs")

    if b is None:
        return
    if b.returncode != 0:
        failures.append(f"bench on the GPU: status {b.returncode}, stderr {b.stderr[-2000:]!r}")
        return
    rows = [json.loads(line) for line in b.stdout.splitlines() if line.strip()]
    names = {x.get("name") for x in rows}
    for want in ("cuda_copy_gbps", "cuda_upsert_us", "cuda_attention_tflops",
                 "cuda_attention_f64_err", "cuda_frame_ms", "cuda_sessions_at_15fps"):
        if want not in names:
            failures.append(f"bench on the GPU: no {want} row")
    for x in rows:
        if not x.get("card") or x.get("backend") != "cuda":
            failures.append(f"bench on the GPU: row without card/backend: {x}")
            break
        print(f"  {x.get('name')}: {x.get('value')} {x.get('unit')} "
              f"{x.get('kernel', '')} B={x.get('B', '')}")


def main(argv):
    if len(argv) < 3 or argv[2] not in ("0", "1"):
        raise SystemExit(__doc__)
    ringkv, built = argv[1], argv[2] == "1"
    extra = [a for a in argv[3:] if a != "--no-bench"]
    bench = "--no-bench" not in argv[3:]
    failures = []
    with tempfile.TemporaryDirectory(prefix="rollout-backend-") as tmp:
        out = os.path.join(tmp, "out")
        r = run([ringkv, "rollout", "--backend", "cuda", "--frames", "40", "--json", "--out", out]
                + extra)
        # OPENBLAS_CORETYPE set: the CPU bench would print a notice about it
        # first, which a refusal must not (the GPU rows do not use OpenBLAS)
        b = (run([ringkv, "bench", "--backend", "cuda", "--quick", "--json"],
                 {"OPENBLAS_CORETYPE": "Haswell"}) if bench else None)
        bad = run([ringkv, "rollout", "--backend", "tpu", "--frames", "1", "--out", out])
        if bad.returncode != 2 or "cpu or cuda" not in bad.stderr:
            failures.append(f"--backend tpu: status {bad.returncode}, stderr {bad.stderr.strip()!r}")
        gpu = False
        for name, p in (("rollout", r), ("bench", b)) if bench else (("rollout", r),):
            err = p.stderr.strip()
            if not built:
                if (p.returncode != 2 or NO_CUDA not in err or "--backend cpu" not in err
                        or len(err.splitlines()) != 1):
                    failures.append(f"{name} --backend cuda without CUDA: status {p.returncode}, "
                                    f"stderr {err!r} (expected 2 and one line, {NO_CUDA!r})")
                else:
                    print(f"  {name}: refused as expected: {err}")
            elif NO_GPU in err:
                if (p.returncode != 2 or p.stdout.strip() or "rkv_" in err
                        or len(err.splitlines()) != 1):
                    failures.append(f"{name} --backend cuda without a GPU: status {p.returncode} "
                                    f"(expected 2), stdout {p.stdout[:200]!r}, stderr {err!r} "
                                    "(one line, no library function names)")
                else:
                    print(f"  {name}: no GPU here, refused cleanly: {err}")
            elif p.returncode != 0:
                failures.append(f"{name} --backend cuda: status {p.returncode}, "
                                f"stderr {err[-2000:]!r}")
            else:
                gpu = True
        if gpu:
            gpu_checks(ringkv, extra, tmp, failures, b)
        # the CPU's replay path against pass by pass (any build)
        cpu = rollout(ringkv, out, ["--frames", "40", "--sessions", "2"] + extra, failures,
                      "CPU pass by pass")
        rep = rollout(ringkv, out, ["--frames", "40", "--sessions", "2"] + extra, failures,
                      "CPU replay path", {"RKV_ROLLOUT_GRAPH": "1"})
        same(cpu, rep, "CPU: replay path vs pass by pass", failures)
    if failures:
        for f in failures:
            print("FAIL:", f)
        raise SystemExit(1)
    print("PASS: --backend cuda " + ("works or is refused cleanly" if built else "is refused")
          + "; the replay path equals pass by pass")


if __name__ == "__main__":
    main(sys.argv)
