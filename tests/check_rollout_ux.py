#!/usr/bin/env python3
"""What `ringkv rollout`, `ringkv plan` and `ringkv replay` say to a user who
gets something wrong, and the rollout's picture legend (docs/rollout.md).

usage: check_rollout_ux.py RINGKV [--image PATH]

Each check runs the command with a bad input and asserts the exit status, that
it fails fast (before any frame: the model is never created), and the words:
  - --out naming a file, a path under a file, --snapshot-out naming a folder:
    exit 2 at once, nothing written;
  - a run that does not fit in memory (waypoint-1.5-720p x 4096 sessions,
    about 3.3 TiB): exit 2 naming the bytes needed and available and how many
    sessions fit; the --out folder is not even created;
  - --image of a missing file ("no such file") or a folder ("is a folder");
    the default image missing (a copy of the binary elsewhere): says so and
    suggests --image;
  - --frames beyond INT32_MAX names the range 1..2147483647;
  - an unknown preset: rollout and plan print the same (library) message;
  - --help: plan states the --memory-gib range, both explain --full-global-ring;
  - replay of binary junk prints only printable ASCII, escaped as \\xNN, on
    short lines;
  - a long run (500,000 demo frames) says how long it should take on stderr
    within seconds (the process is then stopped);
  - a short run writes rollout.png and rollout.txt (the legend), names the
    legend in the text report and the JSON, and writes cell dimensions as
    "N cols x M rows";
  - RKV_ISA: an unknown name is ignored with one line on stderr; the names
    work in any case;
  - an installed layout (PREFIX/bin/ringkv beside PREFIX/share/ringkv/
    earth.jpg) finds its default image from any working directory.
Python standard library only.
"""
import json
import os
import random
import select
import shutil
import subprocess
import sys
import tempfile
import time

FAST_S = 20.0  # a refusal must come well before any frame of a waypoint preset


def run(cmd, timeout=120, cwd=None):
    t0 = time.monotonic()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       errors="replace", timeout=timeout, cwd=cwd)
    return p, time.monotonic() - t0


def expect(failures, what, p, secs, status, needles, fast=True):
    err = p.stderr
    ok = p.returncode == status and all(n in err for n in needles)
    if fast and secs > FAST_S:
        ok = False
    if not ok:
        failures.append(f"{what}: status {p.returncode} (expected {status}), {secs:.1f} s, "
                        f"stderr {err.strip()[:600]!r} (expected {needles!r})")
    else:
        print(f"  ok: {what}: {err.strip().splitlines()[0][:160] if err.strip() else ''}")


def main():
    args = sys.argv[1:]
    if not args:
        raise SystemExit(__doc__)
    ringkv = os.path.abspath(args[0])
    image = None
    if "--image" in args:
        image = args[args.index("--image") + 1]
    img = ["--image", image] if image else []
    failures = []
    with tempfile.TemporaryDirectory(prefix="rollout-ux-") as tmp:
        a_file = os.path.join(tmp, "j.json")
        with open(a_file, "w") as f:
            f.write("{}\n")

        # --out is a file: refused before the model or any frame
        p, s = run([ringkv, "rollout", "--preset", "waypoint-1.5-360p", "--frames", "500",
                    "--out", a_file] + img)
        expect(failures, "--out naming a file", p, s, 2, ["j.json", "not a folder"])
        if p.stdout.strip():
            failures.append(f"--out naming a file: stdout not empty: {p.stdout[:200]!r}")
        with open(a_file) as f:
            if f.read() != "{}\n":
                failures.append("--out naming a file: the file was changed")
        p, s = run([ringkv, "rollout", "--frames", "5", "--out",
                    os.path.join(a_file, "sub")] + img)
        expect(failures, "--out under a file", p, s, 2, ["not a folder"])
        p, s = run([ringkv, "rollout", "--preset", "waypoint-1.5-360p", "--frames", "500",
                    "--out", os.path.join(tmp, "o1"), "--snapshot-out", tmp] + img)
        expect(failures, "--snapshot-out naming a folder", p, s, 2,
               ["--snapshot-out", "is a folder"])
        p, s = run([ringkv, "rollout", "--preset", "waypoint-1.5-360p", "--frames", "500",
                    "--out", os.path.join(tmp, "o1"), "--snapshot-out",
                    os.path.join(tmp, "no-such-folder", "s.snap")] + img)
        expect(failures, "--snapshot-out in a missing folder", p, s, 2,
               ["--snapshot-out", "no such folder"])

        # memory: refused before allocating, naming both figures
        out_mem = os.path.join(tmp, "not-created")
        p, s = run([ringkv, "rollout", "--preset", "waypoint-1.5-720p", "--sessions", "4096",
                    "--out", out_mem] + img)
        expect(failures, "--sessions 4096 of waypoint-1.5-720p", p, s, 2,
               ["not enough memory", "bytes", "available", "--sessions"])
        if os.path.exists(out_mem):
            failures.append("memory refusal: the --out folder was created")

        # images
        p, s = run([ringkv, "rollout", "--frames", "5", "--out", os.path.join(tmp, "o2"),
                    "--image", os.path.join(tmp, "nonexistent.png")])
        expect(failures, "--image of a missing file", p, s, 2, ["nonexistent.png", "no such file"])
        if "fopen" in p.stderr:
            failures.append(f"--image of a missing file: stb's words leak: {p.stderr!r}")
        p, s = run([ringkv, "rollout", "--frames", "5", "--out", os.path.join(tmp, "o2"),
                    "--image", tmp])
        expect(failures, "--image of a folder", p, s, 2, ["is a folder"])
        tiny = os.path.join(tmp, "tiny.png")  # not a JPEG or PNG: decoding fails
        with open(tiny, "wb") as f:
            f.write(b"not an image at all")
        p, s = run([ringkv, "rollout", "--frames", "5", "--out", os.path.join(tmp, "o2"),
                    "--image", tiny])
        expect(failures, "--image of a non-image", p, s, 2, ["cannot decode image"])
        lone = os.path.join(tmp, "bin")
        os.mkdir(lone)
        shutil.copy2(ringkv, os.path.join(lone, "ringkv"))
        p, s = run([os.path.join(lone, "ringkv"), "rollout", "--frames", "5", "--out",
                    os.path.join(tmp, "o3")], cwd=lone)
        expect(failures, "the default image missing", p, s, 2,
               ["data/earth.jpg", "--image PATH"])
        # an installed layout (PREFIX/bin/ringkv, PREFIX/share/ringkv/earth.jpg,
        # as `cmake --install` lays it out): found from any working directory
        if image:
            os.makedirs(os.path.join(tmp, "share", "ringkv"))
            shutil.copy2(image, os.path.join(tmp, "share", "ringkv", "earth.jpg"))
            p, s = run([os.path.join(lone, "ringkv"), "rollout", "--frames", "2", "--out",
                        os.path.join(tmp, "o4")], cwd=lone, timeout=600)
            if p.returncode != 0 or "share/ringkv/earth.jpg" not in p.stdout:
                failures.append(f"installed layout: status {p.returncode}, stdout "
                                f"{p.stdout[:400]!r}, stderr {p.stderr[-300:]!r}")
            else:
                print("  ok: an installed ringkv finds PREFIX/share/ringkv/earth.jpg")

        # ranges and words
        p, s = run([ringkv, "rollout", "--frames", "9223372036854775807"])
        expect(failures, "--frames 2^63-1", p, s, 2, ["1..2147483647"])
        pr, _ = run([ringkv, "rollout", "--preset", "nope"])
        pp, _ = run([ringkv, "plan", "--preset", "nope", "--memory-gib", "1"])
        mr = pr.stderr.strip().replace("ringkv rollout: ", "", 1)
        mp = pp.stderr.strip().replace("ringkv plan: ", "", 1)
        if pr.returncode != 2 or pp.returncode != 2 or mr != mp or "nope" not in mr:
            failures.append(f"unknown preset: rollout {pr.returncode} {pr.stderr.strip()!r}, "
                            f"plan {pp.returncode} {pp.stderr.strip()!r} (expected 2, same words)")
        else:
            print(f"  ok: unknown preset, both say: {mr}")
        hp, _ = run([ringkv, "plan", "--help"])
        hr, _ = run([ringkv, "rollout", "--help"])
        for name, h, needles in (("plan", hp, ["1048576", "16 buckets are addressed"]),
                                 ("rollout", hr, ["16 buckets are addressed", "2147483647",
                                                  "demo", "rollout.txt"])):
            missing = [n for n in needles if n not in h.stdout]
            if h.returncode != 0 or missing:
                failures.append(f"{name} --help: status {h.returncode}, missing {missing}")

        # replay of binary junk: printable ASCII only, short lines
        rng = random.Random(7)
        junk = os.path.join(tmp, "junk.txt")
        with open(junk, "wb") as f:  # no NUL, no whitespace: one long unknown record
            f.write(bytes(rng.choice([b for b in range(1, 256) if b not in b" \t\r\n\v\f#"])
                          for _ in range(3000)) + b"\n")
        p = subprocess.run([ringkv, "replay", junk], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)
        text = p.stdout + p.stderr
        bad = [b for b in text if not (32 <= b < 127 or b == 10)]
        longest = max(len(line) for line in text.split(b"\n"))
        if p.returncode != 1 or bad or b"\\x" not in text or longest > 400:
            failures.append(f"replay of junk: status {p.returncode}, {len(bad)} unprintable "
                            f"bytes, longest line {longest}: {text[:300]!r}")
        else:
            print(f"  ok: replay of junk: {text.decode().splitlines()[0][:160]}")

        # a long run says so at once
        proc = subprocess.Popen([ringkv, "rollout", "--frames", "500000", "--out",
                                 os.path.join(tmp, "o4")] + img,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        line = ""
        t0 = time.monotonic()
        try:
            ready, _, _ = select.select([proc.stderr], [], [], 60.0)
            if ready:
                line = proc.stderr.readline()
        finally:
            proc.kill()
            proc.wait()
            proc.stderr.close()
        if "should take about" not in line or time.monotonic() - t0 > 60:
            failures.append(f"--frames 500000: first stderr line {line.strip()!r}, expected "
                            f"an estimate within 60 s")
        else:
            print(f"  ok: long run: {line.strip()[:160]}")

        # a short run: picture, legend, labelled dimensions
        out = os.path.join(tmp, "o5")
        p, s = run([ringkv, "rollout", "--frames", "24", "--out", out] + img, timeout=600)
        legend = os.path.join(out, "rollout.txt")
        if (p.returncode != 0 or not os.path.isfile(os.path.join(out, "rollout.png"))
                or not os.path.isfile(legend) or legend not in p.stdout
                or " cols x " not in p.stdout or " rows" not in p.stdout):
            failures.append(f"short run: status {p.returncode}, stdout {p.stdout[-1500:]!r}, "
                            f"stderr {p.stderr[-500:]!r}")
        else:
            with open(legend) as f:
                text = f.read()
            for needle in ("Panels", "true view", "local recall", "global recall", "green",
                           "yellow", "red", "blue", "frame "):
                if needle not in text:
                    failures.append(f"legend: no {needle!r} in {text[:500]!r}")
            print(f"  ok: short run wrote {legend} ({len(text.splitlines())} lines)")
        p, s = run([ringkv, "rollout", "--frames", "24", "--json", "--out", out] + img,
                   timeout=600)
        try:
            j = json.loads(p.stdout)
            if j.get("legend") != legend:
                failures.append(f"JSON legend {j.get('legend')!r}, expected {legend!r}")
        except json.JSONDecodeError as e:
            failures.append(f"--json: not JSON ({e}): {p.stdout[:300]!r}")

        # RKV_ISA: a name the library does not know is ignored, said once
        # (a typo used to pick the plain C kernel silently); any case works
        env = dict(os.environ, RKV_ISA="Bogus")
        p = subprocess.run([ringkv, "rollout", "--frames", "2", "--out", out] + img, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           errors="replace", timeout=600)
        if (p.returncode != 0 or "RKV_ISA=Bogus is not one of" not in p.stderr
                or p.stderr.count("RKV_ISA") != 1):
            failures.append(f"RKV_ISA=Bogus: status {p.returncode}, stderr {p.stderr[-500:]!r}")
        else:
            print(f"  ok: RKV_ISA=Bogus: {p.stderr.strip().splitlines()[0][:160]}")
        env["RKV_ISA"] = "GENERIC"
        p = subprocess.run([ringkv, "rollout", "--frames", "2", "--out", out] + img, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           errors="replace", timeout=600)
        if p.returncode != 0 or ", generic" not in p.stdout or "RKV_ISA" in p.stderr:
            failures.append(f"RKV_ISA=GENERIC: status {p.returncode}, stdout "
                            f"{p.stdout[:300]!r}, stderr {p.stderr[-300:]!r}")
        else:
            print("  ok: RKV_ISA=GENERIC picks the generic kernel")

    if failures:
        print("FAIL:")
        for f in failures:
            print("  " + f)
        sys.exit(1)
    print("PASS: rollout, plan and replay messages")


if __name__ == "__main__":
    main()
