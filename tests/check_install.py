#!/usr/bin/env python3
"""`cmake --install`, then the README's and the example's build lines, as a user runs them.

usage: check_install.py CMAKE BUILD_DIR SOURCE_DIR LIBDIR

Installs BUILD_DIR into a temporary prefix standing for the README's
/opt/ringkv, then runs the shell block of README "Install and link" with
only these substitutions: the prefix, `build` -> BUILD_DIR, `cmake` ->
CMAKE, `lib` -> LIBDIR (CMAKE_INSTALL_LIBDIR) in the paths, and app.c a
copy of examples/stream.c; then the build lines in examples/stream.c's
header, which must be the README's lines but for the file names. No system
.pc file is visible (PKG_CONFIG_LIBDIR is an empty folder: no cJSON or
xxHash .pc) and LD_LIBRARY_PATH is unset. Asserts:
  - every line exits 0 and each program runs (1 frame) and says so;
  - the shared programs need libringkv.so.0.2 and find it by their RUNPATH in
    PREFIX/lib; the static ones do not need libringkv at all;
  - `pkg-config --cflags ringkv` is exactly -I PREFIX/include (no cJSON
    path), `--libs` exactly -L PREFIX/lib -lringkv, `--variable=libdir` a
    normalized absolute path, and `--static --libs` adds -ljansson -lxxhash;
  - `pkg-config --modversion ringkv` and the installed libringkv.so.X.Y.Z
    are the installed ringkv.h's RKV_VERSION_* macros; every public header
    is installed.
Python standard library only.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

README_PREFIX = "/opt/ringkv"


def readme_block(readme):
    text = open(readme, encoding="utf-8").read()
    sec = text.split("## Install and link", 1)[1]
    m = re.search(r"```sh\n(.*?)```", sec, re.S)
    if not m:
        raise SystemExit("FAIL: README 'Install and link' has no sh block")
    return m.group(1)


def example_lines(example):
    """The `cc ...` commands of the example's header comment, continuations joined."""
    head = open(example, encoding="utf-8").read().split("*/", 1)[0]
    lines = [re.sub(r"^\s*/?\*+\s?", "", l).rstrip() for l in head.splitlines()]
    cmds, cur = [], None
    for l in lines:
        if cur is None and l.lstrip().startswith("cc "):
            cur = l.strip()
        elif cur is not None:
            cur += " " + l.strip()
        else:
            continue
        if cur.endswith("\\"):
            cur = cur[:-1].rstrip()
        else:
            cmds.append(cur)
            cur = None
    return cmds


def commands(block):
    """Shell commands of a block, continuations joined, comments dropped."""
    out, cur = [], ""
    for l in block.splitlines():
        l = re.sub(r"\s+#.*$", "", l) if not l.lstrip().startswith("#") else ""
        if not l.strip() and not cur:
            continue
        cur += (" " if cur else "") + l.strip()
        if cur.endswith("\\"):
            cur = cur[:-1].rstrip()
        else:
            out.append(cur)
            cur = ""
    return out


def sh(cmd, env, cwd):
    print("running:", cmd, flush=True)
    p = subprocess.run(["sh", "-c", cmd], env=env, cwd=cwd, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    return p


def main():
    if len(sys.argv) != 5:
        raise SystemExit(__doc__)
    cmake, build, source, libdir = sys.argv[1:]
    failures = []
    with tempfile.TemporaryDirectory(prefix="rkv-install-") as tmp:
        tmp = os.path.realpath(tmp)
        prefix = os.path.join(tmp, "opt", "ringkv")
        work = os.path.join(tmp, "work")
        empty = os.path.join(tmp, "no-system-pc")
        os.makedirs(work)
        os.makedirs(empty)
        shutil.copy(os.path.join(source, "examples", "stream.c"), os.path.join(work, "app.c"))
        shutil.copy(os.path.join(source, "examples", "stream.c"), os.path.join(work, "stream.c"))
        env = {k: v for k, v in os.environ.items()
               if k not in ("LD_LIBRARY_PATH", "PKG_CONFIG_PATH")}
        env["PKG_CONFIG_LIBDIR"] = empty

        def subst(cmd):
            cmd = cmd.replace(README_PREFIX + "/lib/", f"{README_PREFIX}/{libdir}/")
            cmd = cmd.replace(README_PREFIX, prefix)
            cmd = re.sub(r"^cmake ", cmake + " ", cmd)
            return re.sub(r"(--install) build ", r"\1 " + build + " ", cmd)

        readme = commands(readme_block(os.path.join(source, "README.md")))
        example = example_lines(os.path.join(source, "examples", "stream.c"))
        if len([c for c in readme if c.startswith("cc ")]) != 2 or len(example) != 2:
            failures.append(f"expected 2 cc lines in the README and 2 in the example: "
                            f"{readme!r} {example!r}")
        # the example's lines are the README's but for the names
        as_readme = [re.sub(r"\bstream\b", "app", c) for c in example]
        if as_readme != [c for c in readme if c.startswith("cc ")]:
            failures.append(f"examples/stream.c's build lines differ from the README's:\n"
                            f"  {example!r}\n  {readme!r}")
        shell = ""
        for cmd in readme:
            if cmd.startswith("export "):  # the block's exports hold for the lines after
                shell += subst(cmd) + "\n"
                continue
            p = sh(shell + subst(cmd), env, work)
            if p.returncode != 0:
                failures.append(f"README line {cmd!r}: status {p.returncode}: "
                                f"{p.stderr[-1500:]}")
        for cmd in example:
            p = sh(shell + subst(cmd), env, work)
            if p.returncode != 0:
                failures.append(f"example line {cmd!r}: status {p.returncode}: "
                                f"{p.stderr[-1500:]}")
        if failures:
            for f in failures:
                print("FAIL:", f)
            raise SystemExit(1)

        # the programs run, without LD_LIBRARY_PATH
        lib = os.path.join(prefix, libdir)
        for prog, static in (("app", False), ("app-static", True), ("stream", False),
                             ("stream-static", True)):
            path = os.path.join(work, prog)
            p = subprocess.run([path, "1"], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
            if p.returncode != 0 or "committed frames 0..0" not in p.stdout:
                failures.append(f"{prog}: status {p.returncode}, stdout {p.stdout!r}, "
                                f"stderr {p.stderr[-500:]!r}")
            dyn = subprocess.run(["readelf", "-d", path], stdout=subprocess.PIPE,
                                 text=True).stdout
            needs = "libringkv.so.0.2" in dyn
            runpath = re.search(r"\((?:RUNPATH|RPATH)\).*\[(.*)\]", dyn)
            if static and needs:
                failures.append(f"{prog}: linked statically, but needs libringkv.so.0.2")
            if not static and (not needs or not runpath or lib not in runpath.group(1).split(":")):
                failures.append(f"{prog}: NEEDED libringkv.so.0.2 {needs}, run path "
                                f"{runpath.group(1) if runpath else None!r} (expected {lib!r})")
            if not failures:
                print(f"  ok: {prog} runs ({'static' if static else 'shared, RUNPATH ' + lib})")

        # what pkg-config gives users
        env_pc = dict(env, PKG_CONFIG_PATH=os.path.join(lib, "pkgconfig"))

        def pc(*args):
            p = subprocess.run(["pkg-config"] + list(args) + ["ringkv"], env=env_pc,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            if p.returncode != 0:
                failures.append(f"pkg-config {' '.join(args)}: {p.stderr.strip()}")
            return p.stdout.split()

        cflags, libs, static = pc("--cflags"), pc("--libs"), pc("--libs", "--static")
        # the version: ringkv.pc's and the installed library's file name are
        # the installed header's RKV_VERSION_* macros (written only there)
        hdr = open(os.path.join(prefix, "include", "ringkv.h"), encoding="utf-8").read()
        want = ".".join(re.search(rf"^#define RKV_VERSION_{p} +([0-9]+)", hdr, re.M).group(1)
                        for p in ("MAJOR", "MINOR", "PATCH"))
        modversion = " ".join(pc("--modversion"))
        if modversion != want:
            failures.append(f"pkg-config --modversion: {modversion!r}; the header says {want!r}")
        if not os.path.exists(os.path.join(lib, f"libringkv.so.{want}")):
            failures.append(f"no {lib}/libringkv.so.{want} (the header's version)")
        # every public header is installed
        for h in ("ringkv.h", "ringkv_cpu.h", "ringkv_backend.h", "ringkv_cuda.h"):
            if not os.path.exists(os.path.join(prefix, "include", h)):
                failures.append(f"{h} is not installed in {prefix}/include")
        libdir_var = " ".join(pc("--variable=libdir"))
        if cflags != [f"-I{prefix}/include"]:
            failures.append(f"pkg-config --cflags: {cflags} (expected only -I{prefix}/include)")
        if libs != [f"-L{lib}", "-lringkv"]:
            failures.append(f"pkg-config --libs: {libs} (expected -L{lib} -lringkv)")
        if (libdir_var != lib or not os.path.isabs(libdir_var)
                or os.path.normpath(libdir_var) != libdir_var):
            failures.append(f"pkg-config --variable=libdir: {libdir_var!r} (expected {lib!r})")
        if not {"-ljansson", "-lxxhash", "-lm"} <= set(static):
            failures.append(f"pkg-config --libs --static: {static}")
        if any("cjson" in f.lower() or "jansson" in f.lower() or "xxhash" in f.lower() for f in cflags + libs):
            failures.append("cJSON or xxHash in users' flags")
        print(f"  pkg-config: --modversion {modversion}; --cflags {' '.join(cflags)}; --libs {' '.join(libs)}; "
              f"--static adds {' '.join(x for x in static if x not in libs)}; libdir {libdir_var}")
    if failures:
        for f in failures:
            print("FAIL:", f)
        raise SystemExit(1)
    print("PASS: installed, built with the README's and the example's lines, ran")


if __name__ == "__main__":
    main()
