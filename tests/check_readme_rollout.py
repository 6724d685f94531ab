#!/usr/bin/env python3
"""The README's quick start prints what the README shows: `ringkv rollout`
on its default input, run in the source folder (so the default image is
data/earth.jpg, as for a user), and every line of the README's sample output
block compared with the run's, but for the measured ones (speed, time, load
average, latency) and the engine line (its thread count and CPU engine
differ by machine); the picture and legend lines with the --out folder the
test gives instead of rollout-out. A line missing from either side fails.

usage: check_readme_rollout.py RINGKV SOURCE_DIR
"""
import os
import re
import subprocess
import sys
import tempfile

MEASURED = ("speed:", "time:", "load average", "latency:")


def sample_block(readme):
    text = open(readme, encoding="utf-8").read()
    m = re.search(r"^```\n(ringkv rollout: preset demo.*?)^```", text, re.M | re.S)
    if not m:
        raise SystemExit("FAIL: README.md has no sample output block starting 'ringkv rollout: preset demo'")
    return m.group(1).splitlines()


def comparable(lines, out_dir):
    kept = []
    for line in lines:
        s = line.strip()
        if s.startswith(MEASURED):
            continue
        if re.fullmatch(r"backend cpu, \d+ thread\(s\), \S+", s):
            kept.append("backend cpu, N thread(s), ENGINE")
            continue
        kept.append(line.rstrip().replace(out_dir + "/", "rollout-out/"))
    return kept


def main(argv):
    if len(argv) != 3:
        raise SystemExit(__doc__)
    ringkv, source = argv[1], argv[2]
    want = comparable(sample_block(os.path.join(source, "README.md")), "rollout-out")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out")
        proc = subprocess.run([ringkv, "rollout", "--out", out], cwd=source, text=True,
                              capture_output=True)
        if proc.returncode != 0:
            raise SystemExit(f"FAIL: ringkv rollout exited {proc.returncode}: {proc.stderr[-2000:]}")
        got = comparable(proc.stdout.splitlines(), out)
        # the comparison strips line ends; the report itself has no trailing blanks
        padded = [line for line in proc.stdout.splitlines() if line != line.rstrip()]
        if padded:
            raise SystemExit(f"FAIL: {len(padded)} report line(s) end in blanks: {padded[:3]!r}")
    if got != want:
        diff = [f"  README: {w!r}\n  run:    {g!r}" for w, g in zip(want, got) if w != g]
        raise SystemExit(f"FAIL: README's sample output differs from the run ({len(want)} vs "
                         f"{len(got)} lines compared):\n" + "\n".join(diff[:10]))
    print(f"ok: README's sample output: {len(want)} lines as the run prints them "
          f"(measured lines not compared)")


if __name__ == "__main__":
    main(sys.argv)
