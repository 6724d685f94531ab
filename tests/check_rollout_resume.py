#!/usr/bin/env python3
"""Resume equals an uninterrupted run, checked from outside through the command.

usage: check_rollout_resume.py RINGKV [N] [--preset NAME] [--dtype DT] [--image PATH]

Runs, with the default single session and one seed:
  A: ringkv rollout --frames 2N --json
  B: ringkv rollout --frames N --snapshot-out S --json
  C: ringkv rollout --resume S --frames N --json
and requires C to end at A's last frame (last_frame = 2N - 1) with A's
output_digest (XXH3-64 of the last frame's f32 attention outputs, in the order
pass, layer, session), and B to end at N - 1 with a different digest.

The recall bookkeeping of a resumed run is rebuilt by replaying the camera
path before the snapshot (docs/rollout.md), so the recall figures add up
exactly: for every layer class and band, A's patch and recalled counts are
B's plus C's (and the PSNR sums up to rounding); C's picture frames lie in
N .. 2N-1.

Refusals, all exit 2 before any frame (the command line does not fit the
snapshot; README "Exit status"), in the user's terms (the option to change,
no library function names): resuming with another --dtype, another --preset,
--full-global-ring, another --seed (the tool names both runs), --sessions 2,
a --resume file that is missing, a folder, or not a snapshot. Also: `ringkv
inspect S` exits 0 and names the clock; `ringkv inspect` on a truncated and
on a bit-flipped copy of S exits 1 with the reason, on a missing file 2.
Python standard library only.
"""
import json
import os
import re
import subprocess
import sys
import tempfile


def run(cmd, expect_ok=True):
    print("running:", " ".join(cmd), flush=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if expect_ok and p.returncode != 0:
        sys.stderr.write(p.stderr)
        raise SystemExit(f"FAIL: exit status {p.returncode}: {' '.join(cmd)}")
    return p


def rollout(ringkv, args, out_dir):
    p = run([ringkv, "rollout", "--json", "--out", out_dir] + args)
    try:
        return json.loads(p.stdout)
    except json.JSONDecodeError as e:
        sys.stderr.write(p.stdout[-2000:])
        raise SystemExit(f"FAIL: stdout is not one JSON object: {e}")


def recall_adds_up(a, b, c):
    """A (frames 0..2N-1) = B (0..N-1) + C (N..2N-1), band by band."""
    out = []
    for cls in ("local", "global"):
        for band in ("near", "mid", "far"):
            cnt = [r["recall_patches"][cls][band] for r in (a, b, c)]
            if cnt[0] != cnt[1] + cnt[2]:
                out.append(f"{cls} {band}: {cnt[0]} patches in A, {cnt[1]} + {cnt[2]} in B + C")
                continue
            rec = [round((r["recall_rate"][cls][band] or 0) * r["recall_patches"][cls][band])
                   for r in (a, b, c)]
            if rec[0] != rec[1] + rec[2]:
                out.append(f"{cls} {band}: {rec[0]} recalled in A, {rec[1]} + {rec[2]} in B + C")
            db = [(r["recall_psnr_db"][cls][band] or 0) * r["recall_patches"][cls][band]
                  for r in (a, b, c)]
            if abs(db[0] - db[1] - db[2]) > 1e-6 * max(1.0, abs(db[0])):
                out.append(f"{cls} {band}: PSNR sum {db[0]} in A, {db[1]} + {db[2]} in B + C")
    for k in ("in_view", "flat", "unseen"):
        v = [r["patches"][k] for r in (a, b, c)]
        if v[0] != v[1] + v[2]:
            out.append(f"patches.{k}: {v[0]} in A, {v[1]} + {v[2]} in B + C")
    if not out:
        print("  recall figures add up: A = B + C in every class and band "
              f"(C: {c['recall_patches']})")
    return out


def main():
    argv = sys.argv[1:]
    if not argv:
        raise SystemExit(__doc__)
    ringkv = argv.pop(0)
    n = 24
    if argv and re.fullmatch(r"\d+", argv[0]):
        n = int(argv.pop(0))
    extra = argv  # --preset/--dtype/--image/--seed pass through
    failures = []
    with tempfile.TemporaryDirectory(prefix="rkv-resume-") as tmp:
        snap = os.path.join(tmp, "session0.safetensors")
        a = rollout(ringkv, ["--frames", str(2 * n)] + extra, os.path.join(tmp, "a"))
        b = rollout(ringkv, ["--frames", str(n), "--snapshot-out", snap] + extra,
                    os.path.join(tmp, "b"))
        c = rollout(ringkv, ["--resume", snap, "--frames", str(n)] + extra,
                    os.path.join(tmp, "c"))
        for name, r, want in (("A", a, 2 * n - 1), ("B", b, n - 1), ("C", c, 2 * n - 1)):
            for k in ("last_frame", "output_digest"):
                if k not in r:
                    failures.append(f"run {name}: no '{k}' in the JSON")
            if r.get("last_frame") != want:
                failures.append(f"run {name}: last_frame {r.get('last_frame')}, expected {want}")
            if not re.fullmatch(r"[0-9a-f]{16}", str(r.get("output_digest", ""))):
                failures.append(f"run {name}: output_digest {r.get('output_digest')!r} is not 16 hex digits")
        if a.get("output_digest") != c.get("output_digest"):
            failures.append(f"resumed digest {c.get('output_digest')} != uninterrupted "
                            f"{a.get('output_digest')}")
        if a.get("output_digest") == b.get("output_digest"):
            failures.append("the digest of frame N-1 equals that of frame 2N-1: it proves nothing")
        if c.get("first_frame") != n:
            failures.append(f"run C: first_frame {c.get('first_frame')}, expected {n}")
        if c.get("output_digest_algorithm") != "xxh3_64":
            failures.append(f"output_digest_algorithm {c.get('output_digest_algorithm')!r}")
        failures += recall_adds_up(a, b, c)
        for pf in c.get("picture_frames", []):
            if not n <= pf.get("frame", -1) < 2 * n:
                failures.append(f"run C: picture frame {pf} outside {n}..{2 * n - 1}")
        if not c.get("picture_frames"):
            failures.append("run C: no picture frames")

        # refusals: another geometry (dtype, preset, rings), another seed,
        # several sessions, a file that is not a snapshot of this run
        dtype = b.get("options", {}).get("dtype", "f32")  # the run's (the preset's by default)
        other = "bf16" if dtype != "bf16" else "f16"
        preset = b.get("options", {}).get("preset", "demo")
        other_preset = "waypoint-1.5-360p" if preset != "waypoint-1.5-360p" else "demo"
        not_snapshot = os.path.join(tmp, "not-a-snapshot.safetensors")
        with open(not_snapshot, "wb") as f:
            f.write(b"\x10\x00\x00\x00\x00\x00\x00\x00{\"a\": 1}        ")
        def replacing(base, args):
            """base with the options args names taken out (each option may be
            given once), then args."""
            names = {a for a in args if a.startswith("--")}
            flags = {"--full-global-ring", "--json"}
            out, i = [], 0
            while i < len(base):
                if base[i] in names:
                    i += 1 if base[i] in flags else 2
                    continue
                out.append(base[i])
                i += 1
            return out + args

        for what, args, status, needles in (
                ("another dtype", ["--dtype", other], 2, [f"--dtype {dtype}"]),
                ("another preset", ["--preset", other_preset, "--dtype", dtype], 2,
                 ["--preset", other_preset]),
                ("--full-global-ring", ["--full-global-ring"], 2, ["--full-global-ring"]),
                ("another seed", ["--seed", "12345"], 2, ["--seed", "seed=12345"]),
                ("two sessions", ["--sessions", "2"], 2, ["--sessions 1"]),
                ("a missing file", ["--resume", os.path.join(tmp, "gone.safetensors")], 2,
                 ["gone.safetensors", "no such file"]),
                ("a folder", ["--resume", tmp], 2, ["is a folder"]),
                ("a file that is not a snapshot", ["--resume", not_snapshot], 2,
                 ["not a ringkv snapshot", "__metadata__.format"])):
            p = run([ringkv, "rollout", "--json", "--out", os.path.join(tmp, "x")]
                    + replacing(["--resume", snap, "--frames", "2"] + extra, args),
                    expect_ok=False)
            leaks = [w for w in ("rkv_", "RKV_ERR") if w in p.stderr]
            if (p.returncode != status or not all(n in p.stderr for n in needles) or leaks
                    or p.stdout.strip()):
                failures.append(f"resume with {what}: status {p.returncode}, stderr "
                                f"{p.stderr.strip()!r} (expected {status} naming {needles!r}, "
                                f"without library names {leaks!r}), stdout {p.stdout[:100]!r}")
            else:
                print(f"  refused as expected ({what}): {p.stderr.strip()}")
        if os.path.exists(os.path.join(tmp, "x", "rollout.png")):
            failures.append("a refused resume wrote a picture: it ran frames")

        # inspect: valid, then damaged copies
        p = run([ringkv, "inspect", snap])
        if f"last committed frame {n - 1}" not in p.stdout:
            failures.append(f"inspect does not show the clock {n - 1}:\n{p.stdout}")
        data = open(snap, "rb").read()
        cases = {
            "truncated": data[: len(data) // 2],
            "flipped": data[:-5] + bytes([data[-5] ^ 1]) + data[-4:],
        }
        for what, blob in cases.items():
            bad = os.path.join(tmp, what + ".safetensors")
            with open(bad, "wb") as f:
                f.write(blob)
            p = run([ringkv, "inspect", bad], expect_ok=False)
            want = "truncated" if what == "truncated" else "checksum"
            if p.returncode != 1 or want not in p.stderr or "rkv_" in p.stderr:
                failures.append(f"inspect of a {what} file: status {p.returncode}, "
                                f"stderr {p.stderr.strip()!r} (expected 1 naming '{want}', "
                                f"no library function names)")
        # a missing file is refused before any file is inspected (exit 2)
        p = run([ringkv, "inspect", snap, os.path.join(tmp, "gone.safetensors")],
                expect_ok=False)
        if p.returncode != 2 or "no such file" not in p.stderr or p.stdout.strip():
            failures.append(f"inspect of a missing file: status {p.returncode}, stderr "
                            f"{p.stderr.strip()!r}, stdout {p.stdout[:100]!r} (expected 2, "
                            f"'no such file', nothing inspected)")
    if failures:
        for f in failures:
            print("FAIL:", f)
        raise SystemExit(1)
    print(f"OK: resume after {n} frames equals {2 * n} uninterrupted frames "
          f"(last_frame {2 * n - 1}, digest {a['output_digest']})")


if __name__ == "__main__":
    main()
