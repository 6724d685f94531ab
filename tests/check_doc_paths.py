#!/usr/bin/env python3
"""Every repository path that README.md, python/README.md and docs/*.md name
exists (a file moved without its docs leaves them pointing nowhere).

usage: check_doc_paths.py REPO_ROOT [--self-test]

A path is a word that starts with one of the repository's top folders
(src/, tools/, tests/, include/, bench/, scripts/, python/, examples/,
data/, docs/, cmake/, fuzz/) or ../shared/, as the docs write them
(`src/cpu/backend_cpu.c`, tests/check_json_keys.py); a glob (* or {a,b})
must match something. Paths under build folders are not checked. The few
paths that are meant not to exist in a clone are listed in ABSENT with the
reason. --self-test also runs the check on a made-up doc naming a missing
file and fails unless that one is reported.
Python standard library only.
"""
import glob
import os
import re
import sys
import tempfile

TOPS = ("src", "tools", "tests", "include", "bench", "scripts", "python", "examples", "data",
        "docs", "cmake", "fuzz")
PATH = re.compile(r"(?<![\w./$-])((?:\.\./shared|%s)/[\w./*{},-]*[\w*}])" % "|".join(TOPS))
ABSENT = {
    "python/ringkv/libringkv.so": "a copy a user may put there for python/setup.py",
    "bench/gpu/h200.jsonl": "the H200 rows, created by the first GPU run kept "
                            "(scripts/gpu_check.sh); no GPU run has been kept yet",
}


def expand(path):
    """The alternatives of a {a,b} group (one group), else the path."""
    m = re.search(r"\{([^{}]*)\}", path)
    if not m:
        return [path]
    return [path[:m.start()] + alt + path[m.end():] for alt in m.group(1).split(",")]


def missing(root, docs):
    """[(doc, line, path)] of the paths named that do not exist."""
    out = []
    for doc in docs:
        with open(doc, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                for m in PATH.finditer(line):
                    p = m.group(1).rstrip(".,")
                    if p in ABSENT:
                        continue
                    base = os.path.join(root, "..", p[3:]) if p.startswith("../") else \
                        os.path.join(root, p)
                    if not any(glob.glob(x) if ("*" in x) else os.path.exists(x)
                               for x in expand(base)):
                        out.append((doc, n, p))
    return out


def main():
    args = sys.argv[1:]
    if not args:
        raise SystemExit(__doc__)
    root = os.path.abspath(args[0])
    docs = [os.path.join(root, "README.md"), os.path.join(root, "python", "README.md")]
    docs += sorted(glob.glob(os.path.join(root, "docs", "*.md")))
    bad = missing(root, docs)
    for doc, n, p in bad:
        print(f"FAIL: {os.path.relpath(doc, root)}:{n} names {p}, which does not exist")
    if "--self-test" in args:
        with tempfile.NamedTemporaryFile("w", suffix=".md") as t:
            t.write("The CPU table is in `src/backend_cpu.c`; see tests/check_doc_paths.py.\n")
            t.flush()
            got = [p for _, _, p in missing(root, [t.name])]
        if got != ["src/backend_cpu.c"]:
            print(f"FAIL: self-test: reported {got}, expected ['src/backend_cpu.c']")
            bad.append(None)
    if bad:
        raise SystemExit(1)
    print(f"PASS: every path named in {len(docs)} documents exists")


if __name__ == "__main__":
    main()
