#!/usr/bin/env python3
"""`ringkv inspect` on snapshot headers that two readers could read apart,
and on texts that would drive a terminal (issue 10, section 4).

usage: check_inspect_text.py RINGKV SNAPSHOT

SNAPSHOT is a valid snapshot file (tests/data/snapshot_v1_bf16_plain.safetensors).
Edited copies get both XXH3-64 checksums recomputed (libxxhash through
ctypes, the rule of docs/snapshot-format.md), so that only the edit is wrong:
  - "last_committed" twice, "23" then "7" (Python's json keeps the last):
    refused, exit 1, the message names the key;
  - a shape written [1.0, ...]: refused naming the tensor and the element;
  - a request id and a model name of bytes ESC [ 2 J (stored hex-coded, so
    the file is valid): the text and the --json output hold no control byte
    and show \\x1b;
  - an ESC sequence in format_version, checksum left stale (the version is
    read before the header checksum): refused as an unsupported version,
    the message escaped.
Python standard library only.
"""
import ctypes
import ctypes.util
import json
import os
import re
import struct
import subprocess
import sys
import tempfile

_xx = ctypes.CDLL(ctypes.util.find_library("xxhash") or "libxxhash.so.0")
_xx.XXH3_64bits.restype = ctypes.c_uint64
_xx.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]


def xxh3(b):
    return _xx.XXH3_64bits(b, len(b))


def edit(raw, old, new, seal=True):
    """raw with the first `old` of its header replaced by `new`, padded
    again; both checksums recomputed when `seal`."""
    n = struct.unpack("<Q", raw[:8])[0]
    head, data = raw[8:8 + n].rstrip(b" "), raw[8 + n:]
    assert old in head, old
    head = head.replace(old, new, 1)
    head += b" " * ((8 - (8 + len(head)) % 8) % 8)
    out = bytearray(struct.pack("<Q", len(head)) + head + data)
    if seal:
        for key in (b"data_xxh3", b"header_xxh3"):
            m = re.search(rb'"' + key + rb'"\s*:\s*"', out[8:8 + len(head)])
            at = 8 + m.end()
            if key == b"data_xxh3":
                out[at:at + 16] = b"%016x" % xxh3(bytes(data))
            else:
                out[at:at + 16] = b"0" * 16
                out[at:at + 16] = b"%016x" % xxh3(bytes(out[:8 + len(head)]))
    return bytes(out)


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return p.returncode, p.stdout.decode("ascii", "replace"), p.stderr.decode("ascii", "replace"), p


def control_bytes(b):
    return [c for c in b if (c < 0x20 and c not in (0x0A,)) or c >= 0x7F]


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    ringkv, snap = sys.argv[1], sys.argv[2]
    raw = open(snap, "rb").read()
    failures = []
    with tempfile.TemporaryDirectory() as d:
        def write(name, b):
            path = os.path.join(d, name)
            with open(path, "wb") as f:
                f.write(b)
            return path

        # the file as given is valid
        rc, out, err, _ = run([ringkv, "inspect", snap])
        if rc != 0:
            failures.append(f"the given snapshot is refused: {err}")
        clock = re.search(rb'"last_committed":"(\d+)"', raw).group(1)

        # two readings: a repeated key (json.loads keeps the last value)
        dup = edit(raw, b'"last_committed":"' + clock + b'"',
                   b'"last_committed":"23","last_committed":"7"')
        n = struct.unpack("<Q", dup[:8])[0]
        if json.loads(dup[8:8 + n])["__metadata__"]["last_committed"] != "7":
            failures.append("Python's json does not read 7 from the repeated key")
        rc, out, err, _ = run([ringkv, "inspect", write("dup.safetensors", dup)])
        if rc != 1 or 'duplicate key "last_committed"' not in err:
            failures.append(f"repeated last_committed: exit {rc}, stderr {err!r}")
        shape = re.search(rb'"shape":\[(\d+),', raw)
        real = edit(raw, shape.group(0), b'"shape":[' + shape.group(1) + b'.0,')
        rc, out, err, _ = run([ringkv, "inspect", write("real.safetensors", real)])
        if rc != 1 or "shape[0] is the real number" not in err or "layer.0." not in err:
            failures.append(f"shape of a real: exit {rc}, stderr {err!r}")

        # texts that would clear the terminal, stored hex-coded: valid
        cls = b"1b5b324a"
        odd = edit(raw, re.search(rb'"request_id":"(?:[^"\\]|\\.)*"', raw).group(0),
                   b'"request_id_hex":"' + cls + b'"')
        odd = edit(odd, re.search(rb'"model":"[^"]*"', odd).group(0), b'"model_hex":"' + cls + b'41"')
        path = write("odd.safetensors", odd)
        for args in ([], ["--json"]):
            rc, out, err, p = run([ringkv, "inspect"] + args + [path])
            bad = control_bytes(p.stdout) + control_bytes(p.stderr)
            if rc != 0 or bad or "\\x1b[2J" not in out:
                failures.append(f"inspect {args} of ESC texts: exit {rc}, control bytes {bad}, "
                                f"stdout {out!r}")
            if args:
                j = json.loads(out)
                if j.get("request_id") != "\\x1b[2J" or j.get("preset") != "\\x1b[2JA":
                    failures.append(f"--json texts: {j.get('request_id')!r}, {j.get('preset')!r}")

        # ESC in the version, checksum stale: still "unsupported format version"
        ver = edit(raw, b'"format_version":"1"', b'"format_version":"\\u001b[2J1"', seal=False)
        for args in ([], ["--json"]):
            rc, out, err, p = run([ringkv, "inspect"] + args + [write("ver.safetensors", ver)])
            bad = control_bytes(p.stdout) + control_bytes(p.stderr)
            if rc != 1 or bad or "unsupported format version '\\x1b[2J1'" not in err:
                failures.append(f"inspect {args} of an ESC version: exit {rc}, control bytes "
                                f"{bad}, stderr {err!r}")
    for f in failures:
        print("FAIL:", f)
    if failures:
        raise SystemExit(1)
    print("ok: repeated keys and reals refused; file texts printed escaped")


if __name__ == "__main__":
    main()
