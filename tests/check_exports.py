#!/usr/bin/env python3
"""A shared library exports exactly the public API its headers declare.

usage: check_exports.py LIBRARY HEADER...

The API is every function the HEADERs declare with RKV_API (comments left
out); the exports are the defined dynamic symbols of LIBRARY
(`nm -D --defined-only`). Fails, naming each symbol, when the library
exports a symbol no header declares (a private rkv__* function, a
third-party library's symbol) or lacks a declared function (hidden by
mistake, or not built). The linker's own markers (_init, _fini, _edata,
_end, __bss_start) are not API and are left out. The library is built with
-fvisibility=hidden and the headers mark the API with RKV_API
(include/ringkv.h), so the two lists agree unless one of them is wrong.
Python standard library and binutils' nm only.
"""
import re
import subprocess
import sys

LINKER_MARKERS = {"_init", "_fini", "_edata", "_end", "__bss_start"}


def declared(headers):
    names = set()
    for h in headers:
        text = re.sub(r"/\*.*?\*/", " ", open(h, encoding="utf-8").read(), flags=re.S)
        text = re.sub(r"//[^\n]*", " ", text)
        text = re.sub(r"^\s*#.*(?:\\\n.*)*", " ", text, flags=re.M)  # the preprocessor's lines
        for decl in re.findall(r"\bRKV_API\b([^;{]*)", text):
            m = re.search(r"\b(rkv_\w+)\s*\(", decl)
            if not m:
                raise SystemExit(f"FAIL: an RKV_API declaration without a function name: {decl!r}")
            names.add(m.group(1))
    return names


def exported(lib):
    out = subprocess.run(["nm", "-D", "--defined-only", lib], check=True,
                         stdout=subprocess.PIPE, text=True).stdout
    names = set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 3:
            names.add(parts[2].split("@")[0])
    return names - LINKER_MARKERS


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    lib, headers = sys.argv[1], sys.argv[2:]
    api, exports = declared(headers), exported(lib)
    if not api or not exports:
        raise SystemExit(f"FAIL: read {len(api)} declarations and {len(exports)} exports: "
                         "the check reads nothing")
    extra, missing = sorted(exports - api), sorted(api - exports)
    for name in extra:
        print(f"FAIL: {lib} exports {name}, which no header declares RKV_API"
              + (" (a private function)" if name.startswith("rkv__") else ""))
    for name in missing:
        print(f"FAIL: {lib} does not export {name}, declared RKV_API")
    if extra or missing:
        raise SystemExit(1)
    print(f"PASS: {lib} exports exactly the {len(api)} functions declared RKV_API in "
          + ", ".join(h.rsplit("/", 1)[-1] for h in headers))


if __name__ == "__main__":
    main()
