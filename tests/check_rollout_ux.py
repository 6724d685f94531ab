#!/usr/bin/env python3
"""What `ringkv` says to a user who gets something wrong (rollout, plan,
replay, inspect, help and version, the exit-status rule), and the rollout's
picture and its legend (docs/rollout.md).

usage: check_rollout_ux.py RINGKV [--image PATH]

Each check runs the command with a bad input and asserts the exit status, that
it is refused before any frame (nothing on stdout: a run prints its report's
header there before its first frame, a refusal nothing; no check depends on
how long anything takes), and the words:
  - --out naming a file, a path under a file, --snapshot-out naming a folder:
    exit 2 at once, nothing written;
  - a named pipe (and a symbolic link to one) as inspect's, replay's,
    --image's, --resume's, --snapshot-out's file or the picture in --out:
    exit 2 at once naming it and its kind, the pipe never opened nor
    replaced (time-limited runs: a hang fails); --snapshot-out through a
    symbolic link writes its target and keeps the link;
  - a run that does not fit in memory (waypoint-1.5-720p x 4096 sessions,
    about 3.3 TiB): exit 2 naming the bytes needed and available and how many
    sessions fit; the --out folder is not even created;
  - --image of a missing file ("no such file") or a folder ("is a folder");
    the default image missing (a copy of the binary elsewhere): says so and
    suggests --image;
  - --frames beyond INT32_MAX names the range 1..2147483647;
  - an unknown preset: rollout and plan print the same (library) message,
    each with the pointer to its --help;
  - --help: plan states the --memory-gib range, both explain --full-global-ring;
  - an input not of its kind is refused with exit 2 before any work (replay
    of a text that is not a trace, of binary data, of JSON without "cases" or
    without its .bin; inspect of a text or of another format's safetensors;
    rollout --resume of a text), while a trace cut short is a replay failure
    (1); replay of binary junk (2) prints only printable ASCII, escaped as
    \\xNN, on short lines;
  - a long run (500,000 demo frames) prints the report's header on stdout,
    then says how long it should take on stderr, projected from at most 64
    frames (its stderr is read until the line comes; a hang guard of 20
    minutes only; the process is then stopped); a 5,000,000-frame run gets
    there with no more memory (peak RSS) than a 50,000-frame one: the camera
    path is computed frame by frame, not built ahead;
  - SIGTERM while the frames run: the run says "stopped by SIGTERM after N
    of M frames; nothing written", removes the --out folders it made, and
    dies of the signal;
    with stderr a pipe whose reader closed, it dies of SIGTERM (not
    SIGPIPE), the folders removed; SIGINT after the last frame (made so:
    stderr a full pipe, the signal sent once /proc shows the run blocked on
    its first stderr line, written after the frames) lets the run finish,
    says so and dies of SIGINT; `ringkv bench` stopped by SIGTERM keeps
    whole rows (each flushed when done: the first comes before the end);
  - --preset without a value lists the presets, the --help hint once;
    --out where mkdir fails names --out; --frames 1 says "1 frame";
  - a picture or legend in an existing --out that is a symbolic link to where
    nothing can be saved (dangling, or through a file) is refused with exit
    2 before any frame, naming the link and its target, the link kept;
  - file names and arguments from the command line are printed escaped
    (\\xNN, as texts from files): rollout, inspect, replay, an unknown
    command, the report's paths, and the library's messages about a file;
  - --resume of a snapshot saved at the largest clock (or at the last clock
    a rollout runs) says that no --frames can continue it; one near it names
    the largest --frames that fits;
  - `ringkv help CMD extra` names 'extra';
  - a write that fails after the frames (a file-size limit, RLIMIT_FSIZE, as
    a full disk): the report is printed, the file is named, exit 1; the
    picture and legend are written both or neither (the old ones kept), no
    temporary file left, a failed --snapshot-out leaves no file and `saved`
    null; a refusal (or that failure) leaves no empty --out folder it made;
    stdout on /dev/full: exit 1, said;
  - inspect of a 3-byte or empty file: not a snapshot (2), too short;
  - a short run writes rollout.png and rollout.txt (the legend), names the
    legend in the text report and the JSON, and writes cell dimensions as
    "N cols x M rows"; its recall table says what the rate is, and its patch
    line counts flat patches as not measured (as the legend does), the
    measured ones equal to the band counts, the parts adding up;
  - RKV_ISA: an unknown name is ignored with one line on stderr; a kernel
    this CPU lacks (by /proc/cpuinfo) is said in one line naming both the
    kernel asked for and the one used; the names work in any case;
  - `ringkv help` states the exit-status rule; `ringkv help CMD` prints what
    `ringkv CMD --help` prints, for every command, each with an exit-status
    section (help's and version's --help too, exit 0); `ringkv version` equals
    `ringkv --version`; usage and argument errors (unknown command or option,
    a missing FILE, --resume or --image) exit 2 in every command without
    library function or status names;
  - an option given twice (--frames, --preset, --resume, --snapshot-out, a
    flag; plan's, bench's and inspect's too) is refused with exit 2 naming it;
  - numbers are read one strict way in plan, rollout and bench (decimal
    digits, the whole argument: no hex, exponent, sign, spaces, inf/nan),
    refused with exit 2 naming the option and the expected form;
  - the legend names the mid-grey speckle of cells no ring holds, and the
    picture shows it: on a jump row both recall panels repeat one 8 x 8
    speckle near mid-grey in every cell;
  - an installed layout (PREFIX/bin/ringkv beside PREFIX/share/ringkv/
    earth.jpg) finds its default image from any working directory, and
    prints it resolved (no bin/..).
Python standard library only.
"""
import json
import os
import random
import re
import select
import shutil
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zlib

from check_inspect_text import edit as edit_snapshot  # both checksums recomputed

# A hang guard, far beyond any plausible run of what a check starts (a
# 500,000-frame run's first frames under the sanitizers on a loaded machine
# take seconds): a regression that hangs fails instead of holding the run.
HANG_GUARD_S = 1200
# The same for a refusal of a named pipe (milliseconds), which would block
# for ever in open() if it were opened: shorter, as eight such cases follow.
FIFO_GUARD_S = 120


def run(cmd, timeout=HANG_GUARD_S, cwd=None):
    t0 = time.monotonic()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       errors="replace", timeout=timeout, cwd=cwd)
    return p, time.monotonic() - t0


def shown(text):
    """text as ringkv prints a file name or argument (tools/escape.c): bytes
    outside printable ASCII as \\xNN, a backslash as \\\\."""
    return "".join("\\\\" if b == 0x5c else chr(b) if 32 <= b < 127 else f"\\x{b:02x}"
                   for b in os.fsencode(text))


def expect(failures, what, p, secs, status, needles, before_work=True):
    """The exit status, the words on stderr and, for a refusal
    (before_work), nothing on stdout: a run prints its header there before
    its first frame (secs is only shown)."""
    err = p.stderr
    ok = p.returncode == status and all(n in err for n in needles)
    if before_work and p.stdout.strip():
        ok = False
    if not ok:
        failures.append(f"{what}: status {p.returncode} (expected {status}), {secs:.1f} s, "
                        f"stderr {err.strip()[:600]!r} (expected {needles!r}), stdout "
                        f"{p.stdout[:300]!r} (expected nothing before any frame)")
    else:
        print(f"  ok: {what}: {err.strip().splitlines()[0][:160] if err.strip() else ''}")


def read_png(path):
    """(width, height, rows of RGB bytes) of an 8-bit RGB PNG (stb's)."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, w, h = 8, b"", 0, 0
    while pos < len(data):
        n = struct.unpack(">I", data[pos:pos + 4])[0]
        kind = data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, color = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and color == 2, "not 8-bit RGB"
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw, stride, rows = zlib.decompress(idat), 3 * w + 1, []
    prev = bytearray(3 * w)
    for y in range(h):
        f, line = raw[y * stride], bytearray(raw[y * stride + 1:(y + 1) * stride])
        for x in range(3 * w):
            a = line[x - 3] if x >= 3 else 0
            b, c = prev[x], (prev[x - 3] if x >= 3 else 0)
            if f == 1:
                line[x] = (line[x] + a) & 255
            elif f == 2:
                line[x] = (line[x] + b) & 255
            elif f == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif f == 4:
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(line)
        prev = line
    return w, h, rows


def check_picture(j, failures):
    """The legend's words against the pixels: on a jump (no cell held by any
    ring) both recall panels are the mid-grey speckle, one 8 x 8 pattern in
    every cell. Layout of tools/sheet.c: GAP_PX 6, TITLE_PX 16, LABEL_PX 14,
    views under 200 pixels wide drawn at 2x."""
    rows = [r["move"] for r in j.get("picture_frames", [])]
    if "jump" not in rows:
        failures.append(f"picture: no jump row to check ({rows})")
        return
    view = j["geometry"]["view"]
    px = view["patch_px"]
    vw, vh = view["cols"] * px, view["rows"] * px
    scale = 2 if vw < 200 else 1
    pw, ph, cell = vw * scale, vh * scale, px * scale
    w, h, img = read_png(j["picture"])
    y0 = 16 + rows.index("jump") * (14 + ph) + 14
    for panel, name in ((1, "local"), (2, "global")):
        x0 = 6 + panel * (pw + 6)
        luma = [[img[y0 + y][3 * (x0 + x)] for x in range(pw)] for y in range(ph)]
        first = [row[:cell] for row in luma[:cell]]
        same = all([row[cx:cx + cell] for row in luma[cy:cy + cell]] == first
                   for cy in range(0, ph, cell) for cx in range(0, pw, cell))
        vals = [v for row in first for v in row]
        mean = sum(vals) / len(vals)
        spread = (sum((v - mean) ** 2 for v in vals) / len(vals)) ** 0.5
        if not same or not 0.4 * 255 < mean < 0.6 * 255 or spread < 2:
            failures.append(f"picture: {name} recall of the jump row: every cell the same "
                            f"{same}, mean {mean:.1f}, spread {spread:.1f} (expected one "
                            f"8 x 8 speckle near 127, spread >= 2: what the legend says)")
        else:
            print(f"  ok: {name} recall panel of the jump row: one speckle pattern, mean "
                  f"{mean:.0f}, spread {spread:.1f}")


def first_estimate(ringkv, frames, out, img):
    """Starts `ringkv rollout --frames FRAMES` and reads its stderr until the
    run-time estimate comes (the state itself: no time limit but the hang
    guard, which kills the child); then, while the child still runs, its
    peak memory (VmHWM of /proc/PID/status, KiB; 0 where there is none) and
    what stdout holds by then (the report's header is written before the
    first frame, the estimate after some frames); then stops it. Returns
    {"line", "others" (stderr lines before it), "header", "hwm_kib"}."""
    proc = subprocess.Popen([ringkv, "rollout", "--frames", str(frames), "--out", out] + img,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            errors="replace")
    guard = threading.Timer(HANG_GUARD_S, proc.kill)
    guard.start()
    got = {"line": "", "others": [], "header": "", "hwm_kib": 0}
    try:
        for line in proc.stderr:  # ends at EOF: the child exited or was killed
            if "should take about" in line:
                got["line"] = line
                break
            got["others"].append(line.strip())
        try:
            with open(f"/proc/{proc.pid}/status") as f:
                got["hwm_kib"] = next((int(l.split()[1]) for l in f if l.startswith("VmHWM:")), 0)
        except OSError:
            pass
        # written (and flushed) before the first frame, so before the line
        if select.select([proc.stdout], [], [], 0)[0]:
            got["header"] = os.read(proc.stdout.fileno(), 1 << 16).decode("utf-8", "replace")
    finally:
        guard.cancel()
        proc.kill()
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    return got


def file_size_limit(limit):
    """preexec_fn: writes past `limit` bytes of any file fail with EFBIG, as
    on a full disk (RLIMIT_FSIZE, SIGXFSZ ignored so that the write returns
    the error instead of killing the process; no root, no special file
    system: the kernel refuses the bytes)."""
    def apply():
        import resource
        import signal
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def check_full_disk(ringkv, img, tmp, failures):
    """A write that fails (a full disk, a file-size limit) after the frames:
    the report is still printed, stderr names the file that failed, exit 1;
    the picture and its legend are written both or neither, never a part of
    one (the files there before stay as they were), no temporary file is
    left; a failed --snapshot-out leaves no file and `saved` null."""
    try:
        import resource  # noqa: F401 (POSIX only)
    except ImportError:
        print("  skipped: full disk (no RLIMIT_FSIZE here)")
        return
    base = [ringkv, "rollout", "--frames", "3"] + img
    ref = os.path.join(tmp, "fd-ref")
    p, _ = run(base + ["--out", ref, "--snapshot-out", os.path.join(ref, "s.snap")])
    if p.returncode != 0:
        failures.append(f"full disk: the reference run failed: {p.stderr[-300:]!r}")
        return
    size = {n: os.path.getsize(os.path.join(ref, n)) for n in ("rollout.txt", "rollout.png",
                                                                 "s.snap")}
    if not size["rollout.txt"] < size["rollout.png"] < size["s.snap"]:
        failures.append(f"full disk: the limits below need legend < picture < snapshot: {size}")
        return
    old = {"rollout.png": b"old picture\n", "rollout.txt": b"old legend\n"}
    # limit: the legend (written first) fails; between legend and picture:
    # the picture fails; between picture and snapshot: only the snapshot
    for limit, failed, needles in (
            (size["rollout.txt"] // 2, "legend", ["cannot write the legend", "rollout.txt"]),
            ((size["rollout.txt"] + size["rollout.png"]) // 2, "picture",
             ["cannot write the picture", "rollout.png"]),
            ((size["rollout.png"] + size["s.snap"]) // 2, "snapshot",
             ["--snapshot-out failed", "s.snap"])):
        # the folder's name holds an ESC: the library's messages about the
        # files in it show it escaped, as the command's own do
        out = os.path.join(tmp, f"fd-{failed}-\x1b[0m")
        os.mkdir(out)
        for name, data in old.items():
            with open(os.path.join(out, name), "wb") as f:
                f.write(data)
        snap = os.path.join(out, "s.snap")
        for json_out in (False, True):
            p = subprocess.run(base + ["--out", out, "--snapshot-out", snap]
                               + (["--json"] if json_out else []),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               errors="replace", timeout=HANG_GUARD_S,
                               preexec_fn=file_size_limit(limit))
            what = f"full disk ({failed} fails at a {limit}-byte limit{', --json' if json_out else ''})"
            files = {n: open(os.path.join(out, n), "rb").read() for n in os.listdir(out)}
            pictured = failed == "snapshot"
            problems = []
            if (p.returncode != 1 or not all(n in p.stderr for n in needles)
                    or "\x1b" in p.stderr or "\\x1b[0m" not in p.stderr):
                problems.append(f"status {p.returncode}, stderr {p.stderr[-400:]!r} (expected 1 "
                                f"naming {needles}, the folder's ESC escaped)")
            if [n for n in files if ".tmp-" in n] or "s.snap" in files:
                problems.append(f"left {sorted(files)} (no temporary file, no snapshot)")
            if pictured and not (files.get("rollout.png", b"").startswith(b"\x89PNG")
                                 and files.get("rollout.txt", b"").startswith(b"rollout.png:")):
                problems.append("the picture and legend were not written whole")
            if not pictured and any(files.get(n) != d for n, d in old.items()):
                problems.append("the picture or legend there before was changed (both or "
                                "neither, never a part)")
            if json_out:
                try:
                    j = json.loads(p.stdout)
                    if (j.get("saved") is not None or j["options"]["snapshot_out"] != snap
                            or (j.get("picture") is not None) != pictured
                            or (j.get("legend") is not None) != pictured
                            or not j.get("output_digest")):
                        problems.append(f"JSON saved {j.get('saved')!r}, picture "
                                        f"{j.get('picture')!r}, legend {j.get('legend')!r}")
                except (json.JSONDecodeError, KeyError) as e:
                    problems.append(f"no JSON report ({e}): {p.stdout[:200]!r}")
            elif ("digest:" not in p.stdout
                  or "snapshot: NOT saved to " + shown(snap) not in p.stdout
                  or ("picture: NOT written" in p.stdout) == pictured):
                problems.append(f"the report: {p.stdout[-500:]!r}")
            if problems:
                failures.append(f"{what}: " + "; ".join(problems))
            else:
                print(f"  ok: {what}: {p.stderr.strip().splitlines()[-1][:160]}")
        if failed != "snapshot":  # a fresh --out is not left behind empty
            fresh = os.path.join(tmp, f"fd-new-{failed}")
            p = subprocess.run(base + ["--out", fresh], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, timeout=HANG_GUARD_S,
                               preexec_fn=file_size_limit(limit))
            if p.returncode != 1 or os.path.exists(fresh):
                failures.append(f"full disk, a new --out: status {p.returncode}, left "
                                f"{os.path.exists(fresh)} (expected 1, the empty folder it made "
                                f"removed)")


def blocked_writing_a_pipe(pid):
    """Whether process pid's main thread sleeps in a write to a pipe, by
    /proc/PID/wchan, else /proc/PID/syscall (write on fd 2: x86_64's 1,
    aarch64's 64); None where neither tells."""
    try:
        with open(f"/proc/{pid}/wchan") as f:
            wchan = f.read().strip()
        if wchan not in ("", "0"):
            return "pipe_write" in wchan
    except OSError:
        pass
    try:
        with open(f"/proc/{pid}/syscall") as f:
            fields = f.read().split()
        return fields[:2] in (["1", "0x2"], ["64", "0x2"])
    except (OSError, IndexError):
        return None


def full_pipe():
    """(read end, write end) of a pipe filled to the brim: a write to it
    blocks until the read end is drained. The filler bytes are 'x'."""
    r, w = os.pipe()
    os.set_blocking(w, False)
    try:
        while True:
            os.write(w, b"x" * 4096)
    except BlockingIOError:
        pass
    try:
        while True:
            os.write(w, b"x")
    except BlockingIOError:
        pass
    os.set_blocking(w, True)
    return r, w


def drain(fd):
    """Everything fd gives up to EOF, the filler 'x's of full_pipe dropped."""
    chunks = []
    while True:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks).lstrip(b"x").decode("utf-8", "replace")


def main():
    args = sys.argv[1:]
    if not args:
        raise SystemExit(__doc__)
    ringkv = os.path.abspath(args[0])
    image = None
    if "--image" in args:
        image = os.path.abspath(args[args.index("--image") + 1])  # some runs change folder
    img = ["--image", image] if image else []
    failures = []
    with tempfile.TemporaryDirectory(prefix="rollout-ux-") as tmp:
        a_file = os.path.join(tmp, "j.json")
        with open(a_file, "w") as f:
            f.write("{}\n")

        # --out is a file: refused before the model or any frame
        p, s = run([ringkv, "rollout", "--frames", "3",
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
        p, s = run([ringkv, "rollout", "--frames", "3",
                    "--out", os.path.join(tmp, "o1"), "--snapshot-out", tmp] + img)
        expect(failures, "--snapshot-out naming a folder", p, s, 2,
               ["--snapshot-out", "is a folder"])
        if "is a folder, not a file" not in p.stderr:
            failures.append(f"--snapshot-out naming a folder: {p.stderr.strip()!r} (expected "
                            f"'is a folder, not a file')")
        # --out where mkdir fails after the checks pass (/proc for root; the
        # check refuses it for others): named as --out either way
        if os.path.isdir("/proc"):
            p, s = run([ringkv, "rollout", "--frames", "1", "--out",
                        "/proc/ringkv-no-such-folder/sub"] + img)
            expect(failures, "--out in /proc", p, s, 2, ["--out", "ringkv-no-such-folder"])
        # --preset without its value: the presets listed, the hint once
        names = ["demo", "waypoint-1.5-360p", "waypoint-1.5-720p"]
        for cmd in ("rollout", "plan"):
            p, s = run([ringkv, cmd, "--preset"])
            expect(failures, f"{cmd} --preset without a value", p, s, 2,
                   ["--preset needs a value ("] + names)
            if p.stderr.count("--help") != 1:
                failures.append(f"{cmd} --preset without a value: the --help hint "
                                f"{p.stderr.count('--help')} times: {p.stderr!r}")
        p, s = run([ringkv, "rollout", "--frames", "3",
                    "--out", os.path.join(tmp, "o1"), "--snapshot-out",
                    os.path.join(tmp, "no-such-folder", "s.snap")] + img)
        expect(failures, "--snapshot-out in a missing folder", p, s, 2,
               ["--snapshot-out", "no such folder"])
        # a refusal after --out was created (--snapshot-out may name a file
        # in it, so --out is made before that check) removes what it made,
        # the folders above it too, and nothing that was there before
        deep = os.path.join(tmp, "made", "deep")
        p, s = run([ringkv, "rollout", "--frames", "1", "--out", deep, "--snapshot-out",
                    os.path.join(tmp, "no-such-folder", "s.snap")] + img)
        expect(failures, "--snapshot-out in a missing folder, --out two new folders", p, s, 2,
               ["--snapshot-out", "no such folder"])
        left = [d for d in ("o1", "made") if os.path.exists(os.path.join(tmp, d))]
        if left or not os.path.isdir(tmp):
            failures.append(f"a refused --snapshot-out left --out folders behind: {left}")

        # a dangling link into a missing folder: refused before the run (2),
        # like the missing folder itself, naming the link and its target
        dang = os.path.join(tmp, "dang")
        os.symlink(os.path.join("no-such-folder-2", "x"), dang)
        p, s = run([ringkv, "rollout", "--frames", "3",
                    "--out", os.path.join(tmp, "o-dang"), "--snapshot-out", dang] + img)
        expect(failures, "--snapshot-out: a dangling link into a missing folder", p, s, 2,
               ["--snapshot-out", "'" + dang + "'", "a link to", "no-such-folder-2",
                "no such folder"])
        if not os.path.islink(dang) or os.path.lexists(os.path.join(tmp, "no-such-folder-2")):
            failures.append("a refused dangling --snapshot-out link lost the link or made its "
                            "folder")
        if os.path.exists(os.path.join(tmp, "o-dang")):
            failures.append("a refused dangling --snapshot-out link left the --out folder")

        # the picture or the legend in an existing --out through a link to
        # where nothing can be saved: refused before any frame (2), as the
        # same link given as --snapshot-out, naming the link and its target;
        # the link is kept and nothing is written
        o_link = os.path.join(tmp, "o-link-out")
        os.mkdir(o_link)
        for name, to, needles in (
                ("rollout.txt", os.path.join("no-such-folder-3", "x.txt"),
                 ["a link to", "no-such-folder-3", "no such folder"]),
                ("rollout.png", os.path.join("..", "j.json", "x.png"),
                 ["a link to", "j.json", "not a folder"])):
            link_path = os.path.join(o_link, name)
            os.symlink(to, link_path)
            p, s = run([ringkv, "rollout", "--frames", "3",
                        "--out", o_link] + img)
            expect(failures, f"--out with {name} a link to {to}", p, s, 2,
                   ["--out", "'" + link_path + "' (a link to"] + needles)
            if sorted(os.listdir(o_link)) != [name] or os.readlink(link_path) != to:
                failures.append(f"a refused link {name} in --out: left {os.listdir(o_link)}")
            os.unlink(link_path)

        # --out itself, or a folder above it, a dangling symbolic link:
        # refused before any frame (2, nothing on stdout), naming the link
        # and its target; nothing is created, the link kept
        o_dang = os.path.join(tmp, "o-dangling")
        os.symlink("no-such-folder-4", o_dang)
        for out in (o_dang, os.path.join(o_dang, "sub")):
            p, s = run([ringkv, "rollout", "--frames", "3", "--out", out] + img)
            expect(failures, f"--out {out!r} through a dangling link", p, s, 2,
                   ["--out", "'" + o_dang + "' (a link to", "no-such-folder-4",
                    "dangling symbolic link"])
            if (os.readlink(o_dang) != "no-such-folder-4"
                    or os.path.lexists(os.path.join(tmp, "no-such-folder-4"))):
                failures.append("a refused dangling --out link lost the link or made its folder")
        os.unlink(o_dang)

        # --out a folder the user cannot write in, or a new folder in one:
        # refused before any frame (2), nothing written. Root writes
        # anywhere, so as root the command runs as 'nobody' (uid 65534).
        locked = os.path.join(tmp, "locked")
        os.mkdir(locked, 0o555)
        os.chmod(locked, 0o555)
        as_user = None
        if os.geteuid() == 0:
            os.chmod(tmp, 0o755)  # nobody must reach the folder and the image
            def as_user():
                os.setgid(65534)
                os.setuid(65534)
        for out in (locked, os.path.join(locked, "new")):
            p = subprocess.run([ringkv, "rollout", "--frames", "3", "--out", out] + img,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               errors="replace", timeout=HANG_GUARD_S, preexec_fn=as_user)
            expect(failures, f"--out {out!r} in a folder not writable", p, 0, 2,
                   ["--out", "'" + locked + "'", "Permission denied"])
            if os.listdir(locked):
                failures.append(f"--out in a folder not writable: left {os.listdir(locked)}")
        os.chmod(locked, 0o755)
        os.chmod(tmp, 0o700)

        # a folder access() calls writable where no file can be created (root
        # in /proc): refused before any frame (2, nothing on stdout, where a
        # run prints its header before its first frame), as the save would
        # fail only after the frames; the check creates a file there for real
        def refuses_files(folder):
            try:
                fd, name = tempfile.mkstemp(dir=folder)
            except OSError:
                return True
            os.close(fd)
            os.unlink(name)
            return False
        if os.path.isdir("/proc") and refuses_files("/proc"):
            for what, extra, needles in (
                    ("--out /proc", ["--out", "/proc"], ["--out", "'/proc'"]),
                    ("--snapshot-out /proc/y", ["--out", os.path.join(tmp, "o-proc"),
                                                "--snapshot-out", "/proc/y"],
                     ["--snapshot-out", "'/proc'"])):
                p, s = run([ringkv, "rollout", "--frames", "2"] + extra + img)
                expect(failures, f"{what} (no file can be created there)", p, s, 2, needles)
            if os.path.exists(os.path.join(tmp, "o-proc")):
                failures.append("--snapshot-out /proc/y refused: the --out folder it made is left")
        else:
            print("  skip: /proc accepts files here (not root?): the /proc cases")

        # file names and arguments from the command line are printed escaped
        # (\xNN: an ESC or BEL would drive the terminal), as texts from files
        evil = "\x1b]0;pwned\x07"
        escaped_out = os.path.join(tmp, "o-\x1b[2J-x")
        with open(os.path.join(tmp, evil), "w") as f:
            f.write("not a snapshot, not a folder\n")
        for args, status in ((["rollout", "--frames", "1", "--image", evil], 2),
                             (["rollout", "--frames", "1", "--out", evil] + img, 2),
                             (["rollout", "--frames", "1", "--resume", os.path.join(tmp, evil)]
                              + img, 2),
                             (["rollout", "--frames", "1", "--snapshot-out",
                               os.path.join(tmp, "gone" + evil, "s.snap")] + img, 2),
                             (["rollout", "--frames", evil], 2), (["rollout", evil], 2),
                             (["inspect", os.path.join(tmp, evil)], 2), (["replay", evil], 2),
                             ([evil], 2), (["help", evil], 2), (["version", evil], 2),
                             (["rollout", "--frames", "2", "--out", escaped_out] + img, 0)):
            p = subprocess.run([ringkv] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               cwd=tmp, timeout=HANG_GUARD_S)
            text = p.stdout + p.stderr
            raw = [b for b in text if not (32 <= b < 127 or b == 10)]
            want = shown("\x1b[2J") if status == 0 else shown(evil)
            if p.returncode != status or raw or want.encode() not in text:
                failures.append(f"ringkv {args!r}: status {p.returncode} (expected {status}), "
                                f"{len(raw)} raw control or non-ASCII bytes, {text[-400:]!r} "
                                f"(expected {want!r} escaped)")
        print("  ok: file names and arguments from the command line are printed escaped")

        # files that are not regular ones: a named pipe, and a symbolic link
        # to one, as an input (inspect, replay, --image, --resume) or an
        # output (--snapshot-out, the picture in --out): exit 2 at once,
        # naming the path and what it is, the pipe never opened (an open
        # without a writer would block: each run has a time limit, so that a
        # regression fails instead of hanging) nor replaced by a file
        fifo, to_fifo = os.path.join(tmp, "pipe"), os.path.join(tmp, "to-pipe")
        os.mkfifo(fifo)
        os.symlink("pipe", to_fifo)
        o_np, o_pipe = os.path.join(tmp, "o-np"), os.path.join(tmp, "o-pipe")
        os.mkdir(o_pipe)
        os.mkfifo(os.path.join(o_pipe, "rollout.png"))
        kind = ["is a named pipe (FIFO), not a regular file"]
        for args, needles in (
                (["inspect", fifo], ["snapshot", "'" + fifo + "'"]),
                (["inspect", "--json", to_fifo], ["'" + to_fifo + "'"]),
                (["replay", fifo], ["'" + fifo + "'"]),
                (["rollout", "--frames", "1", "--image", fifo, "--out", o_np], ["image"]),
                (["rollout", "--frames", "1", "--resume", to_fifo, "--out", o_np] + img,
                 ["--resume"]),
                (["rollout", "--frames", "1", "--out", o_np, "--snapshot-out", fifo] + img,
                 ["--snapshot-out", "'" + fifo + "'"]),
                (["rollout", "--frames", "1", "--out", o_np, "--snapshot-out", to_fifo] + img,
                 ["--snapshot-out", "'" + to_fifo + "'", "a link to '" + fifo + "'"]),
                (["rollout", "--frames", "1", "--out", o_pipe] + img,
                 ["--out", "rollout.png"])):
            try:
                p, s = run([ringkv] + args, timeout=FIFO_GUARD_S)
            except subprocess.TimeoutExpired:
                failures.append(f"ringkv {' '.join(args)}: still running after {FIFO_GUARD_S} s "
                                f"(blocked on the named pipe?)")
                continue
            expect(failures, f"{args[0]} {' '.join(args[1:-1])[:40]} with a named pipe", p, s,
                   2, kind + needles)
        # --out naming the pipe itself: the kind of file is said, not "a file"
        try:
            p, s = run([ringkv, "rollout", "--frames", "1", "--out", fifo] + img,
                       timeout=FIFO_GUARD_S)
            expect(failures, "rollout --out a named pipe", p, s, 2,
                   ["--out '" + fifo + "' is a named pipe (FIFO), not a folder"])
        except subprocess.TimeoutExpired:
            failures.append(f"ringkv rollout --out PIPE: still running after {FIFO_GUARD_S} s")
        if not stat.S_ISFIFO(os.lstat(fifo).st_mode) or not os.path.islink(to_fifo):
            failures.append("the named pipe or the link to it was replaced")
        if os.path.exists(o_np) or [n for n in os.listdir(tmp) if ".tmp-" in n]:
            failures.append("a refusal of a named pipe created --out or a temporary file")
        # a symbolic link to a snapshot: followed, the link kept, its target
        # written; inspect reads through it
        target, link = os.path.join(tmp, "saved.snap"), os.path.join(tmp, "link.snap")
        with open(target, "w") as f:
            f.write("old\n")
        os.symlink("saved.snap", link)
        p, s = run([ringkv, "rollout", "--frames", "1", "--out", os.path.join(tmp, "o-link"),
                    "--snapshot-out", link] + img, timeout=HANG_GUARD_S)
        q, _ = run([ringkv, "inspect", "--json", target])
        if (p.returncode != 0 or not os.path.islink(link) or os.readlink(link) != "saved.snap"
                or q.returncode != 0 or not json.loads(q.stdout).get("valid")):
            failures.append(f"--snapshot-out through a symbolic link: status {p.returncode}, "
                            f"link kept {os.path.islink(link)}, inspect of its target "
                            f"{q.returncode} {q.stdout[:200]!r} {p.stderr[-300:]!r}")
        else:
            print("  ok: named pipes refused (2) as inputs and outputs; a link to a snapshot "
                  "is followed and kept")

        # a snapshot saved at the last clock a rollout runs (or past it: the
        # largest clock) cannot be continued by any --frames; one near it
        # names the largest --frames that fits (its clock edited, both
        # checksums recomputed)
        raw = open(target, "rb").read()
        for clock, frames, needles in (
                (2 ** 63 - 1, "1", ["9223372036854775807 is past the last clock",
                                    "no --frames can continue it"]),
                (2 ** 31 - 2, "1", ["2147483646 is already the last clock",
                                    "no --frames can continue it"]),
                (2 ** 31 - 10, "9", ["ask for at most --frames 8"])):
            edited = os.path.join(tmp, f"clock-{clock}.snap")
            with open(edited, "wb") as f:
                f.write(edit_snapshot(raw, b'"last_committed":"0"',
                                      b'"last_committed":"%d"' % clock))
            p, s = run([ringkv, "rollout", "--frames", frames, "--resume", edited, "--out",
                        os.path.join(tmp, "o-clock")] + img)
            expect(failures, f"--resume of a snapshot at clock {clock}, --frames {frames}", p, s,
                   2, ["--resume", "the last clock a rollout runs (2147483646)"] + needles)
            if "fewer --frames" in p.stderr or (frames == "1" and "ask for" in p.stderr):
                failures.append(f"--resume at clock {clock}: asks for fewer --frames: "
                                f"{p.stderr.strip()!r}")

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
        expect(failures, "--image of a missing file", p, s, 2, ["nonexistent.png", "no such file",
                                                               "(see 'ringkv rollout --help')"])
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
                        os.path.join(tmp, "o4")], cwd=lone, timeout=HANG_GUARD_S)
            installed = os.path.realpath(os.path.join(tmp, "share", "ringkv", "earth.jpg"))
            if p.returncode != 0 or "share/ringkv/earth.jpg" not in p.stdout:
                failures.append(f"installed layout: status {p.returncode}, stdout "
                                f"{p.stdout[:400]!r}, stderr {p.stderr[-300:]!r}")
            elif f"image {installed}:" not in p.stdout or "/../" in p.stdout:
                failures.append(f"installed layout: the image not printed resolved as "
                                f"{installed!r}: {p.stdout[:400]!r}")
            else:
                print("  ok: an installed ringkv finds PREFIX/share/ringkv/earth.jpg")

        # ranges and words
        p, s = run([ringkv, "rollout", "--frames", "9223372036854775807"])
        expect(failures, "--frames 2^63-1", p, s, 2, ["1..2147483647"])
        pr, _ = run([ringkv, "rollout", "--preset", "nope"])
        pp, _ = run([ringkv, "plan", "--preset", "nope", "--memory-gib", "1"])
        mr = pr.stderr.strip().replace("ringkv rollout: ", "", 1).replace("rollout --help", "CMD --help")
        mp = pp.stderr.strip().replace("ringkv plan: ", "", 1).replace("plan --help", "CMD --help")
        if (pr.returncode != 2 or pp.returncode != 2 or mr != mp or "nope" not in mr
                or "(see 'ringkv CMD --help')" not in mr):
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

        # help and version: each command's help both ways, one version
        top, _ = run([ringkv, "help"])
        if top.returncode != 0 or "Exit status" not in top.stdout or "docs/json.md" not in top.stdout:
            failures.append(f"ringkv help: status {top.returncode}, no exit-status rule or "
                            f"docs/json.md: {top.stdout[-600:]!r}")
        for cmd in ("rollout", "replay", "plan", "bench", "inspect"):
            a, _ = run([ringkv, "help", cmd])
            b, _ = run([ringkv, cmd, "--help"])
            if (a.returncode != 0 or b.returncode != 0 or a.stdout != b.stdout
                    or not a.stdout.startswith(f"usage: ringkv {cmd}") or cmd not in top.stdout
                    or "Exit status" not in a.stdout):
                failures.append(f"ringkv help {cmd}: status {a.returncode}, --help "
                                f"{b.returncode}, {a.stdout[:120]!r} (expected '{cmd} --help', "
                                f"with the exit status)")
        # help and version are commands too: their --help exits 0 with an
        # exit-status section, and equals 'ringkv help help' / 'help version'
        hh, _ = run([ringkv, "help", "help"])
        hv, _ = run([ringkv, "help", "version"])
        for args, want in ((["help", "--help"], hh), (["help", "-h"], hh), (["--help", "--help"], hh),
                           (["version", "--help"], hv), (["--version", "-h"], hv)):
            a, _ = run([ringkv] + args)
            if (a.returncode != 0 or a.stdout != want.stdout or want.returncode != 0
                    or "Exit status" not in a.stdout or not a.stdout.startswith("usage: ringkv")):
                failures.append(f"ringkv {' '.join(args)}: status {a.returncode}, stdout "
                                f"{a.stdout[:160]!r}, stderr {a.stderr[:160]!r} (expected 0 and "
                                f"the text of 'ringkv help {want.args[2]}', with the exit "
                                f"status)")
        print("  ok: every command's --help (help and version too) exits 0 with the exit status")
        p, s = run([ringkv, "help", "rollout", "extra"])
        expect(failures, "ringkv help rollout extra", p, s, 2, ["unexpected argument 'extra'"])

        # a report that cannot be written is not a success (stdout checked)
        if os.path.exists("/dev/full"):
            with open("/dev/full", "w") as full:
                p = subprocess.run([ringkv, "plan", "--preset", "demo", "--memory-gib", "1"],
                                   stdout=full, stderr=subprocess.PIPE, text=True,
                                   timeout=HANG_GUARD_S)
            if p.returncode != 1 or "writing the output failed" not in p.stderr:
                failures.append(f"ringkv plan > /dev/full: status {p.returncode} (expected 1), "
                                f"stderr {p.stderr.strip()[:200]!r}")
            else:
                print(f"  ok: stdout on a full disk: {p.stderr.strip()}")
        v1, _ = run([ringkv, "version"])
        v2, _ = run([ringkv, "--version"])
        if (v1.returncode or v2.returncode or v1.stdout != v2.stdout
                or not re.fullmatch(r"ringkv \d+\.\d+\.\d+\n", v1.stdout)):
            failures.append(f"version: {v1.returncode} {v1.stdout!r}, --version: "
                            f"{v2.returncode} {v2.stdout!r}")
        else:
            print(f"  ok: 'ringkv version' = 'ringkv --version' = {v1.stdout.strip()!r}")
        # one exit-status rule: usage and argument errors 2 in every command,
        # in the user's words (no library function or status names)
        gone = os.path.join(tmp, "gone.file")
        for args, needle in ((["nope"], "unknown command"), (["help", "nope"], "unknown command"),
                             (["rollout", "--bogus"], "--bogus"), (["plan", "--bogus"], "--bogus"),
                             (["inspect", "--bogus"], "--bogus"), (["replay", "--bogus"], "--bogus"),
                             (["bench", "--bogus"], "--bogus"), (["inspect", gone], "no such file"),
                             (["replay", gone], "no such file"),
                             (["rollout", "--resume", gone, "--out", os.path.join(tmp, "o6")],
                              "no such file"),
                             (["rollout", "--image", gone, "--out", os.path.join(tmp, "o6")],
                              "no such file")):
            p, s = run([ringkv] + args)
            leaks = [w for w in ("rkv_", "RKV_ERR") if w in p.stderr]
            if p.returncode != 2 or needle not in p.stderr or leaks or p.stdout.strip():
                failures.append(f"ringkv {' '.join(args)}: status {p.returncode} (expected 2), "
                                f"stderr {p.stderr.strip()[:300]!r} (expected {needle!r}, no "
                                f"{leaks!r})")
        print("  ok: usage and argument errors exit 2 in every command")

        # an option given twice is refused in every command (it used to win
        # silently): exit 2 at once, naming the option
        o9 = os.path.join(tmp, "o9")
        snap_a, snap_b = os.path.join(tmp, "a.safetensors"), os.path.join(tmp, "b.safetensors")
        for args, opt in ((["rollout", "--frames", "3", "--frames", "4", "--out", o9], "--frames"),
                          (["rollout", "--preset", "demo", "--preset=waypoint-1.5-360p", "--out",
                            o9], "--preset"),
                          (["rollout", "--resume", snap_a, "--resume", snap_b, "--out", o9],
                           "--resume"),
                          (["rollout", "--snapshot-out", snap_a, "--snapshot-out=" + snap_b,
                            "--out", o9], "--snapshot-out"),
                          (["rollout", "--json", "--frames", "2", "--json", "--out", o9], "--json"),
                          (["rollout", "--out", o9, "--out", o9], "--out"),
                          (["plan", "--preset", "demo", "--memory-gib", "1", "--memory-gib", "2"],
                           "--memory-gib"),
                          (["plan", "--preset", "demo", "--preset", "demo", "--memory-gib", "1"],
                           "--preset"),
                          (["plan", "--preset", "demo", "--memory-gib", "1", "--dtype", "f32",
                            "--dtype=bf16"], "--dtype"),
                          (["bench", "--threads", "1", "--threads", "2"], "--threads"),
                          (["bench", "--quick", "--quick"], "--quick"),
                          (["inspect", "--json", "--json", snap_a], "--json")):
            p, s = run([ringkv] + args)
            if (p.returncode != 2 or f"{opt} given twice" not in p.stderr or p.stdout.strip()
                    or os.path.exists(o9)):
                failures.append(f"ringkv {' '.join(args)}: status {p.returncode} (expected 2), "
                                f"stderr {p.stderr.strip()[:300]!r} (expected '{opt} given "
                                f"twice'), stdout {p.stdout[:100]!r}")
        print("  ok: an option given twice is refused in rollout, plan, bench and inspect")

        # numbers: one strict reading in every command (decimal digits, the
        # whole argument, then the range); the message names the option and
        # the expected form
        numbers = [(["plan", "--preset", "demo", "--memory-gib"], v, "--memory-gib")
                   for v in ("0x10", " 5", "5 ", "1e3", "inf", "nan", "+5", "-0", "5,5", "",
                             ".5", "5.", ".", "1..5", "0.5.")]
        numbers += [(["rollout", opt], v, opt)
                    for opt, vals in (("--frames", (" 3", "3 ", "+3", "0x10", "1e3", "3.0")),
                                      ("--sessions", ("+1", " 1")), ("--threads", ("0x2", "2 ")),
                                      ("--seed", ("0x10", " 1", "-1", "18446744073709551616")),
                                      ("--migrate-every", ("0x2", "1e1")))
                    for v in vals]
        numbers += [(["bench", "--threads"], v, "--threads") for v in (" 2", "0x2", "2k", "")]
        for args, value, opt in numbers:
            p, s = run([ringkv] + args + [value, "--out", os.path.join(tmp, "o8")]
                       if args[0] == "rollout" else [ringkv] + args + [value])
            if (p.returncode != 2 or f"{opt} expects" not in p.stderr
                    or f"'{value}'" not in p.stderr or p.stdout.strip()):
                failures.append(f"ringkv {' '.join(args)} {value!r}: status {p.returncode} "
                                f"(expected 2), stderr {p.stderr.strip()[:300]!r} (expected "
                                f"'{opt} expects ... got {value!r}')")
        for value, gib in (("16", 16.0), ("0.5", 0.5), ("0.25", 0.25), ("007", 7.0),
                           ("1048576", 1048576.0)):
            p, _ = run([ringkv, "plan", "--preset", "demo", "--json", "--memory-gib", value])
            got = json.loads(p.stdout).get("memory_gib") if p.returncode == 0 else None
            if got != gib:
                failures.append(f"plan --memory-gib {value!r}: status {p.returncode}, "
                                f"memory_gib {got!r} (expected {gib})")
        print(f"  ok: {len(numbers)} malformed numbers refused in plan, rollout and bench, "
              f"naming the option; decimal forms accepted")

        # an input not of its kind is refused (2, nothing done), in every
        # command that reads one; an input of its kind gone wrong is a
        # failure found by the work (1)
        text = os.path.join(tmp, "notes.md")
        with open(text, "w") as f:
            f.write("# notes\n\nRing buffers are nice.\n")
        st = os.path.join(tmp, "weights.safetensors")  # safetensors, another format
        hdr = json.dumps({"__metadata__": {"format": "pt"},
                          "w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
        with open(st, "wb") as f:
            f.write(struct.pack("<Q", len(hdr)) + hdr + b"\0\0\0\0")
        three, zero = os.path.join(tmp, "three.txt"), os.path.join(tmp, "zero.txt")
        with open(three, "w") as f:  # shorter than any safetensors file: not a snapshot
            f.write("ab\n")
        open(zero, "w").close()
        empty_manifest = os.path.join(tmp, "m.json")
        with open(empty_manifest, "w") as f:
            f.write('{"version": 1}\n')
        lone_manifest = os.path.join(tmp, "lone.json")  # no lone.bin beside it
        with open(lone_manifest, "w") as f:
            f.write('{"cases": []}\n')
        cut = os.path.join(tmp, "cut.txt")  # a trace cut short: of its kind, fails
        with open(cut, "w") as f:
            f.write("# a trace\ngeometry num_sessions=1 n_kv_heads=1 ring_frames=2 "
                    "ring_buckets=2 d_head=4 tokens_per_frame=128 pinned_dilation=1\n")
        for args, status, needles in (
                (["replay", text], 2, ["notes.md:3", "not a ringkv operation trace", "'Ring'"]),
                (["replay", st], 2, ["not a ringkv operation trace", "NUL"]),
                (["replay", cut, text], 2, ["notes.md", "not a ringkv operation trace"]),
                (["replay", empty_manifest], 2, ["not a ringkv attention-vector manifest",
                                                  '"cases"']),
                (["replay", text + ".json"], 2, ["no such file"]),
                (["replay", lone_manifest], 2, ["lone.bin", "no such file"]),
                (["replay", cut], 1, ["no final_written line"]),
                (["inspect", text], 2, ["notes.md", "not a ringkv snapshot",
                                        "byte 9 of this one is 'R'"]),
                (["inspect", st], 2, ["not a ringkv snapshot", "format 'pt'"]),
                (["inspect", three], 2, ["three.txt", "not a ringkv snapshot", "holds 3 bytes",
                                         "too short to be a safetensors file"]),
                (["inspect", "--json", zero], 2, ["zero.txt", "not a ringkv snapshot",
                                                  "holds 0 bytes"]),
                (["rollout", "--resume", three, "--out", os.path.join(tmp, "o7")], 2,
                 ["--resume", "not a ringkv snapshot", "too short"]),
                (["rollout", "--resume", text, "--out", os.path.join(tmp, "o7")], 2,
                 ["--resume", "not a ringkv snapshot"])):
            p, s = run([ringkv] + args)
            where = p.stderr if status == 2 else p.stdout
            if (p.returncode != status or not all(n in where for n in needles)
                    or (status == 2 and ("PASS" in p.stdout or "FAIL" in p.stdout))):
                failures.append(f"ringkv {' '.join(args)}: status {p.returncode} (expected "
                                f"{status}), stdout {p.stdout.strip()[:200]!r}, stderr "
                                f"{p.stderr.strip()[:300]!r} (expected {needles!r})")
            else:
                print(f"  ok: {args[0]} {os.path.basename(args[-1])}: {status}: "
                      f"{where.strip().splitlines()[0][:150]}")

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
        if (p.returncode != 2 or bad or b"\\x" not in text or longest > 400
                or b"not a ringkv operation trace" not in p.stderr):
            failures.append(f"replay of junk: status {p.returncode}, {len(bad)} unprintable "
                            f"bytes, longest line {longest}: {text[:300]!r}")
        else:
            print(f"  ok: replay of junk: {text.decode().splitlines()[0][:160]}")

        # a long run says what it runs, then how long it should take, after
        # its first frames (states, not times: its stderr is read until the
        # line comes); the camera path is computed frame by frame, so ten
        # times the frames cost no memory up to there
        runs = {}
        for frames in (500000, 50000, 5000000):
            runs[frames] = first_estimate(ringkv, frames, os.path.join(tmp, "o4"), img)
            est = runs[frames]
            m = re.search(r"projected from the first (\d+) frames", est["line"])
            if (not est["line"].startswith("ringkv rollout: this run should take about")
                    or not m or int(m.group(1)) > 64 or est["others"]
                    or not est["header"].startswith(f"ringkv rollout: preset demo, 1 session(s) x "
                                                    f"{frames} frames")):
                failures.append(f"--frames {frames}: estimate {est['line'].strip()!r} (expected "
                                f"one projected from at most 64 frames), stderr before it "
                                f"{est['others']!r}, stdout before it {est['header'][:300]!r} "
                                f"(expected the report's header)")
            else:
                print(f"  ok: --frames {frames}: header, then {est['line'].strip()[:120]}")
        grown = runs[5000000]["hwm_kib"] - runs[50000]["hwm_kib"]
        if grown > 64 * 1024:  # a camera path built ahead: 5e6 poses of 40 bytes
            failures.append(f"--frames 5000000 reached its estimate with {grown} KiB more peak "
                            f"memory than --frames 50000 ({runs[5000000]['hwm_kib']} vs "
                            f"{runs[50000]['hwm_kib']} KiB): is the camera path built ahead?")
        else:
            print(f"  ok: peak memory at the estimate: {runs[50000]['hwm_kib']} KiB for 50,000 "
                  f"frames, {runs[5000000]['hwm_kib']} KiB for 5,000,000")

        # SIGTERM in the frame loop (the loop runs once the estimate is on
        # stderr): the run says so, leaves no folder of its own making, and
        # dies of the signal
        out = os.path.join(tmp, "o4t", "sub")
        proc = subprocess.Popen([ringkv, "rollout", "--frames", "500000", "--out", out] + img,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                errors="replace")
        guard = threading.Timer(HANG_GUARD_S, proc.kill)
        guard.start()
        try:
            seen = any("should take about" in line for line in proc.stderr)  # EOF: it exited
            made = os.path.isdir(out)
            proc.send_signal(signal.SIGTERM)
            rest = proc.stderr.read()
            proc.wait()
        finally:
            guard.cancel()
            proc.kill()
            proc.stderr.close()
        if (not seen or not made or proc.returncode != -signal.SIGTERM
                or "stopped by SIGTERM after" not in rest or "nothing written" not in rest
                or os.path.exists(os.path.join(tmp, "o4t"))):
            failures.append(f"SIGTERM: loop reached {seen}, --out made {made}, status "
                            f"{proc.returncode} (expected {-signal.SIGTERM}), stderr {rest!r}, "
                            f"folder left: {os.path.exists(os.path.join(tmp, 'o4t'))}")
        else:
            print(f"  ok: SIGTERM: {rest.strip()[:120]}; no folder left")

        # SIGTERM with stderr a pipe its reader closed (`... 2>&1 | head`):
        # the "stopped by" line fails with EPIPE instead of SIGPIPE killing
        # the run before its cleanup (states: the estimate read, then the
        # read end closed, then the signal)
        out = os.path.join(tmp, "o4p", "sub")
        proc = subprocess.Popen([ringkv, "rollout", "--frames", "500000", "--out", out] + img,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        guard = threading.Timer(HANG_GUARD_S, proc.kill)
        guard.start()
        try:
            seen = any(b"should take about" in line for line in proc.stderr)
            proc.stderr.close()
            proc.send_signal(signal.SIGTERM)
            proc.wait()
        finally:
            guard.cancel()
            proc.kill()
        if not seen or proc.returncode != -signal.SIGTERM or os.path.exists(
                os.path.join(tmp, "o4p")):
            failures.append(f"SIGTERM, stderr a closed pipe: loop reached {seen}, status "
                            f"{proc.returncode} (expected {-signal.SIGTERM}, not "
                            f"{-signal.SIGPIPE}), folder left: "
                            f"{os.path.exists(os.path.join(tmp, 'o4p'))}")
        else:
            print("  ok: SIGTERM, stderr a closed pipe: died of SIGTERM, no folder left")

        # stdout a pipe its reader closed before the run (`ringkv rollout |
        # true`): the header's write raises SIGPIPE, which stops the run
        # before its first frame like SIGTERM: the folder removed, then it
        # dies of SIGPIPE (it ran every frame, exit 1, with SIGPIPE ignored)
        out = os.path.join(tmp, "o4q", "sub")
        r, w = os.pipe()
        os.close(r)
        try:
            p = subprocess.run([ringkv, "rollout", "--frames", "500000", "--out", out] + img,
                               stdout=w, stderr=subprocess.PIPE, text=True, errors="replace",
                               timeout=HANG_GUARD_S)
        finally:
            os.close(w)
        if (p.returncode != -signal.SIGPIPE or "stopped by SIGPIPE after 0 of" not in p.stderr
                or os.path.exists(os.path.join(tmp, "o4q"))):
            failures.append(f"stdout a closed pipe: status {p.returncode} (expected "
                            f"{-signal.SIGPIPE}), stderr {p.stderr[-300:]!r}, folder left: "
                            f"{os.path.exists(os.path.join(tmp, 'o4q'))}")
        else:
            print("  ok: stdout a closed pipe: stopped before the first frame, died of SIGPIPE")

        # SIGINT after the last frame: the run finishes (report, picture,
        # snapshot), says so, and dies of the signal. The state is made, not
        # waited for: stderr is a pipe full before the run, so the run's
        # first line there (the --migrate-every summary, printed after the
        # last frame) blocks it; the signal goes once /proc shows it blocked
        out, snap = os.path.join(tmp, "o4i"), os.path.join(tmp, "o4i.st")
        r, w = full_pipe()
        with open(os.path.join(tmp, "o4i.stdout"), "w+") as report:
            proc = subprocess.Popen([ringkv, "rollout", "--frames", "2", "--migrate-every", "1",
                                     "--out", out, "--snapshot-out", snap] + img,
                                    stdout=report, stderr=w)
            os.close(w)
            guard = threading.Timer(HANG_GUARD_S, proc.kill)
            guard.start()
            try:
                blocked = None
                while proc.poll() is None:
                    blocked = blocked_writing_a_pipe(proc.pid)
                    if blocked is not False:
                        break
                    time.sleep(0.01)  # polling the state, not standing in for it
                if blocked:
                    proc.send_signal(signal.SIGINT)
                rest = drain(r)
                proc.wait()
            finally:
                guard.cancel()
                proc.kill()
            report.seek(0)
            text = report.read()
        if blocked is None:
            print("  skipped: SIGINT after the last frame: /proc tells no blocked write here")
        elif (proc.returncode != -signal.SIGINT
              or "SIGINT came after the last frame; the run and its files are complete"
              not in rest or "stopped by" in rest or "picture:" not in text
              or not os.path.isfile(os.path.join(out, "rollout.png"))
              or not os.path.isfile(snap)):
            failures.append(f"SIGINT after the last frame: blocked {blocked}, status "
                            f"{proc.returncode} (expected {-signal.SIGINT}), stderr {rest!r}, "
                            f"report {text[-300:]!r}, picture "
                            f"{os.path.isfile(os.path.join(out, 'rollout.png'))}, snapshot "
                            f"{os.path.isfile(snap)}")
        else:
            print(f"  ok: SIGINT after the last frame: {rest.strip().splitlines()[-1]}")

        # `ringkv bench > file` stopped by a signal keeps the rows done: each
        # row is flushed when done (bench/row.c). The first row is read as it
        # comes, then SIGTERM; every line read is then a whole JSON row
        proc = subprocess.Popen([ringkv, "bench", "--quick", "--json", "--threads", "1"],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        guard = threading.Timer(HANG_GUARD_S, proc.kill)
        guard.start()
        try:
            first = proc.stdout.readline()
            proc.send_signal(signal.SIGTERM)
            lines = [first] + proc.stdout.read().splitlines(keepends=True)
            proc.wait()
        finally:
            guard.cancel()
            proc.kill()
            proc.stdout.close()
        whole = []
        for line in lines:
            try:
                whole.append(line.endswith(b"\n") and isinstance(json.loads(line), dict))
            except ValueError:
                whole.append(False)
        if proc.returncode != -signal.SIGTERM or not first or not all(whole):
            failures.append(f"bench stopped by SIGTERM: status {proc.returncode} (expected "
                            f"{-signal.SIGTERM}: the first row came before the end), rows "
                            f"{whole}, last {lines[-1][-200:] if lines else b''!r}")
        else:
            print(f"  ok: bench stopped by SIGTERM: {len(lines)} whole row(s) kept")

        # one frame: "1 frame", not "1 frames"
        p, s = run([ringkv, "rollout", "--frames", "1", "--out", os.path.join(tmp, "o5a")] + img)
        if p.returncode != 0 or "session(s) x 1 frame (clocks 0..0)" not in p.stdout:
            failures.append(f"--frames 1: status {p.returncode}, header "
                            f"{p.stdout.splitlines()[:1]!r}")
        else:
            print(f"  ok: --frames 1: {p.stdout.splitlines()[0]}")

        # a short run: picture, legend, labelled dimensions
        out = os.path.join(tmp, "o5")
        p, s = run([ringkv, "rollout", "--frames", "24", "--out", out] + img, timeout=HANG_GUARD_S)
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
                           "yellow", "red", "blue", "frame ", "mid-grey speckle",
                           "same 8 x 8 pattern"):
                if needle not in " ".join(text.split()):
                    failures.append(f"legend: no {needle!r} in {text[:500]!r}")
            if "flat grey" in text:
                failures.append("legend: says 'flat grey', the panels show a speckle")
            print(f"  ok: short run wrote {legend} ({len(text.splitlines())} lines)")
            # the report's words agree with the legend's ("flat: not measured")
            # and say what the rate is; the patch counts add up
            report = " ".join(p.stdout.split())
            m = re.search(r"\((\d+) patches in view: (\d+) measured above, (\d+) flat \(no "
                          r"texture: not measured\), (\d+) textured but never in view before "
                          r"\(in no band\)\)", report)
            rows = re.findall(r"local((?: +[\d.-]+ +[\d.-]+ +\d+){3})", p.stdout)
            counts = [int(x) for x in rows[0].split()[2::3]] if rows else []
            if ("rate = share recalled at PSNR >= 30 dB" not in report
                    or "rate mean dB count" not in report or "patches measured" in report
                    or not m or "not measured" not in " ".join(text.split())
                    or int(m.group(1)) != sum(int(m.group(k)) for k in (2, 3, 4))
                    or int(m.group(2)) != sum(counts)):
                failures.append(f"report's recall words: {p.stdout[-900:]!r} (expected the rate "
                                f"said, 'N patches in view: M measured above (= the band "
                                f"counts {counts}), F flat (not measured), U ...' adding up)")
            else:
                print(f"  ok: report: {m.group(0)}")
        p, s = run([ringkv, "rollout", "--frames", "24", "--json", "--out", out] + img,
                   timeout=HANG_GUARD_S)
        try:
            j = json.loads(p.stdout)
            if j.get("legend") != legend:
                failures.append(f"JSON legend {j.get('legend')!r}, expected {legend!r}")
            else:
                check_picture(j, failures)
        except json.JSONDecodeError as e:
            failures.append(f"--json: not JSON ({e}): {p.stdout[:300]!r}")

        check_full_disk(ringkv, img, tmp, failures)

        # RKV_ISA: a name the library does not know is ignored, said once
        # (a typo used to pick the plain C kernel silently); any case works
        env = dict(os.environ, RKV_ISA="Bogus")
        p = subprocess.run([ringkv, "rollout", "--frames", "2", "--out", out] + img, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           errors="replace", timeout=HANG_GUARD_S)
        if (p.returncode != 0 or "RKV_ISA=Bogus is not one of" not in p.stderr
                or p.stderr.count("RKV_ISA") != 1):
            failures.append(f"RKV_ISA=Bogus: status {p.returncode}, stderr {p.stderr[-500:]!r}")
        else:
            print(f"  ok: RKV_ISA=Bogus: {p.stderr.strip().splitlines()[0][:160]}")
        # RKV_ISA naming a kernel this CPU lacks: one line naming both the
        # kernel asked for and the one used (it ran silently); checked for
        # the names /proc/cpuinfo's flags rule out
        try:
            flags = set(next(l for l in open("/proc/cpuinfo") if l.startswith("flags"))
                        .split(":", 1)[1].split())
        except (OSError, StopIteration):
            flags = None
        a512 = {"avx512f", "avx512vl", "avx512bw", "avx512dq"}
        needs = {"amx": a512 | {"amx_tile", "amx_bf16"}, "avx512": a512,
                 "avx512bf16": a512 | {"avx512_bf16"}}
        def isa_run(dtype):
            """A 2-frame run under env: its status, JSON isa, RKV_ISA lines."""
            p = subprocess.run([ringkv, "rollout", "--frames", "2", "--dtype", dtype, "--json",
                                "--out", out] + img,
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               errors="replace", timeout=HANG_GUARD_S)
            used = json.loads(p.stdout).get("isa") if p.returncode == 0 else None
            return p, used, [l for l in p.stderr.splitlines() if "RKV_ISA" in l]

        for name, need in needs.items():
            if flags is None or need <= flags:
                continue
            env["RKV_ISA"] = name
            # bf16 storage: the kernel the JSON names (the first layer's) is
            # then the engine itself, also where that is a bf16 pair engine
            # (avx512bf16 on an AMD CPU), which runs f32 layers on avx512
            p, used, lines = isa_run("bf16")
            if (p.returncode != 0 or len(lines) != 1 or f"RKV_ISA={name} " not in lines[0]
                    or f"the {name} kernel" not in lines[0] or f"the {used} kernel" not in lines[0]):
                failures.append(f"RKV_ISA={name} on a CPU without it: status {p.returncode}, "
                                f"isa {used!r}, stderr {p.stderr[-400:]!r} (expected one line "
                                f"naming the {name} kernel and the {used} kernel used)")
            else:
                print(f"  ok: RKV_ISA={name}: {lines[0][:160]}")
            # f32 storage: a bf16 pair engine runs it on avx512, and the
            # line names that kernel too (it named only the bf16 one)
            p, used, lines = isa_run("f32")
            if (p.returncode != 0 or len(lines) != 1 or not used
                    or not re.search(r"\b%s\b" % re.escape(used), lines[0])):
                failures.append(f"RKV_ISA={name}, f32, on a CPU without it: status "
                                f"{p.returncode}, isa {used!r}, stderr {p.stderr[-400:]!r} "
                                f"(expected one line naming the {used} kernel f32 runs on)")
            else:
                print(f"  ok: RKV_ISA={name}, f32: names {used}")
        env["RKV_ISA"] = "GENERIC"
        p = subprocess.run([ringkv, "rollout", "--frames", "2", "--out", out] + img, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           errors="replace", timeout=HANG_GUARD_S)
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
