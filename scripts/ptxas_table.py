#!/usr/bin/env python3
"""The ptxas resource usage of every CUDA kernel, from a build log.

Configure a CUDA build with -DRKV_CUDA_PTXAS_VERBOSE=ON, build the CUDA
objects and keep the log; this prints one row per (kernel, architecture):
registers, spill stores / loads, stack frame and static shared memory.
Kernel names are demangled and shortened to `name<template args>` without
namespaces, so that a kernel moved between files or namespaces keeps its
row. Given two logs, it prints the rows side by side and exits 1 when any
count differs (docs/cuda.md, "Moving kernels without a GPU").

  cmake -S . -B build-cuda -DRKV_CUDA_PTXAS_VERBOSE=ON
  cmake --build build-cuda --target ringkv_cuda_objs 2>&1 | tee ptxas.log
  python3 scripts/ptxas_table.py ptxas.log                 # the table
  python3 scripts/ptxas_table.py before.log after.log      # the comparison
"""
import re
import subprocess
import sys

ENTRY = re.compile(r"Compiling entry function '([^']+)' for '([^']+)'")
FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
USED = re.compile(r"Used (\d+) registers(?:.*?(\d+) bytes smem)?")


def demangle(names):
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True,
                         check=True).stdout.split("\n")
    return dict(zip(names, out))


def short(name):
    """void ns::kernel<args>(params) -> kernel<args>, without namespaces."""
    name = re.sub(r"^void ", "", name)
    name = name.replace("(anonymous namespace)::", "")
    depth, cut = 0, len(name)
    for i, ch in enumerate(name):  # the parameter list: the first '(' outside <>
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            cut = i
            break
    name = name[:cut]
    return re.sub(r"\b[A-Za-z_][A-Za-z_0-9]*::", "", name)


def parse(path):
    """{(kernel, arch): (regs, spill_st, spill_ld, stack, smem)}"""
    rows, cur, frame = {}, None, None
    with open(path, errors="replace") as f:
        for line in f:
            m = ENTRY.search(line)
            if m:
                cur, frame = (m.group(1), m.group(2)), None
                continue
            m = FRAME.search(line)
            if m and cur:
                frame = tuple(int(x) for x in m.groups())
                continue
            m = USED.search(line)
            if m and cur:
                regs, smem = int(m.group(1)), int(m.group(2) or 0)
                st, sp_st, sp_ld = frame or (0, 0, 0)
                rows[cur] = (regs, sp_st, sp_ld, st, smem)
                cur = None
    names = demangle(sorted({k for k, _ in rows}))
    return {(short(names[k]), arch): v for (k, arch), v in rows.items()}


def fmt(v):
    return "-" if v is None else f"{v[0]} | {v[1]} / {v[2]} | {v[3]} | {v[4]}"


def main(argv):
    if len(argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    logs = [parse(p) for p in argv[1:]]
    if not all(logs):
        print("no 'Compiling entry function' lines: was the build configured with "
              "-DRKV_CUDA_PTXAS_VERBOSE=ON and were the objects rebuilt?", file=sys.stderr)
        return 2
    keys = sorted(set().union(*logs))
    if len(logs) == 1:
        print("| kernel | arch | registers | spill stores / loads (B) | stack (B) | static smem (B) |")
        print("|---|---|---|---|---|---|")
        for k in keys:
            print(f"| `{k[0]}` | {k[1]} | {fmt(logs[0][k])} |")
        return 0
    print("| kernel | arch | before: registers | spills st / ld | stack | smem "
          "| after: registers | spills st / ld | stack | smem | |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    differ = 0
    for k in keys:
        a, b = logs[0].get(k), logs[1].get(k)
        same = a == b
        differ += not same
        print(f"| `{k[0]}` | {k[1]} | {fmt(a)} | {fmt(b)} | {'same' if same else 'DIFFERS'} |")
    print(f"\n{len(keys)} kernels x architectures, {differ} differ", file=sys.stderr)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
