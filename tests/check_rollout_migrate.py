#!/usr/bin/env python3
"""`ringkv rollout --migrate-every N` changes nothing, checked through the command.

usage: check_rollout_migrate.py RINGKV [--image PATH]

Runs the same rollout (demo preset, 3 sessions, 40 frames, one seed) twice:
  A: ringkv rollout --json
  B: ringkv rollout --migrate-every 3 --json
B moves every session to a second model through export / import (reserve,
copy of the regions, digests compared, import, release) after every third
frame, 13 times; C does the same with frames replayed from a recording
(RKV_ROLLOUT_GRAPH=1: the CUDA graph path's stand-in on the CPU), recorded
again after each move. Requires B's and C's last_frame and output_digest (XXH3-64 of
the last frame's attention outputs) and recall figures to equal A's, B's
options.migrate_every to be 3 (A's 0), and B to say on stderr how many
migrations it made (13, of 3 sessions) and its JSON migrations.rounds to be 13
(A's migrations null). Also: --migrate-every 0 and a
non-number are refused with exit 2. Python standard library only.
"""
import json
import os
import subprocess
import sys
import tempfile


def run(cmd, expect=0, env=None):
    print("running:", " ".join(cmd), flush=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       env=None if env is None else {**os.environ, **env})
    if p.returncode != expect:
        sys.exit(f"FAIL: exit {p.returncode} (expected {expect}): {' '.join(cmd)}\n{p.stderr}")
    return p


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    exe, extra = sys.argv[1], sys.argv[2:]
    with tempfile.TemporaryDirectory() as tmp:
        base = [exe, "rollout", "--frames", "40", "--sessions", "3", "--seed", "7",
                "--out", tmp, "--json", *extra]
        a = run(base)
        b = run(base + ["--migrate-every", "3"])
        # the frame replayed from a recording (device.h's stand-in for a CUDA
        # graph on the CPU): recorded again on the model the sessions moved to
        c = run(base + ["--migrate-every", "3"], env={"RKV_ROLLOUT_GRAPH": "1"})
        ja, jb, jc = json.loads(a.stdout), json.loads(b.stdout), json.loads(c.stdout)
        fails = []
        for key in ("last_frame", "output_digest", "recall_patches", "recall_rate",
                    "recall_psnr_db", "patches"):
            if ja[key] != jb[key]:
                fails.append(f"{key}: {ja[key]!r} without migrations, {jb[key]!r} with")
            if ja[key] != jc[key]:
                fails.append(f"{key}: {ja[key]!r} without migrations, {jc[key]!r} with them "
                             "and the recorded frame (RKV_ROLLOUT_GRAPH=1)")
        if (ja["options"]["migrate_every"], jb["options"]["migrate_every"]) != (0, 3):
            fails.append(f"options.migrate_every: {ja['options']['migrate_every']!r}, "
                         f"{jb['options']['migrate_every']!r}; expected 0, 3")
        if "13 migrations of 3 sessions" not in b.stderr:
            fails.append(f"stderr does not say 13 migrations of 3 sessions: {b.stderr!r}")
        if (jb.get("migrations") or {}).get("rounds") != 13 or ja.get("migrations") is not None:
            fails.append(f"JSON migrations: {jb.get('migrations')!r} with, "
                         f"{ja.get('migrations')!r} without (expected 13 rounds, null)")
        for bad in ("0", "x"):
            p = run([exe, "rollout", "--migrate-every", bad, "--out", tmp], expect=2)
            if "--migrate-every" not in p.stderr:
                fails.append(f"--migrate-every {bad}: the refusal does not name the option")
        if fails:
            sys.exit("FAIL:\n  " + "\n  ".join(fails))
        print(f"ok: output_digest {ja['output_digest']} with and without 13 migrations")


if __name__ == "__main__":
    main()
