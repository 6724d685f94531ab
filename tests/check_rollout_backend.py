#!/usr/bin/env python3
"""`--backend cuda` of `ringkv rollout` and `ringkv bench` fails cleanly or works.

usage: check_rollout_backend.py RINGKV BUILT_WITH_CUDA(0|1) [--image PATH]

- Built without CUDA (0): both commands exit 2 and say "ringkv was built
  without CUDA".
- Built with CUDA (1) on a machine without a GPU: both exit 1 with the
  library's message ("the CUDA runtime sees 0 device(s)"), nothing on stdout.
- Built with CUDA on a machine with a GPU: a 40-frame rollout on the GPU
  reports last_frame 39, a 16-digit XXH3-64 digest, and the recall pattern
  of the rings on the first local layer (near recalled, docs/rollout.md);
  `bench --backend cuda --quick --json` prints rows.
- Either way, `--backend` with another name exits 2.
Python standard library only.
"""
import json
import re
import subprocess
import sys
import tempfile

NO_CUDA = "ringkv was built without CUDA"
NO_GPU = "the CUDA runtime sees 0 device(s)"


def run(cmd):
    print("running:", " ".join(cmd), flush=True)
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def main(argv):
    if len(argv) < 3 or argv[2] not in ("0", "1"):
        raise SystemExit(__doc__)
    ringkv, built = argv[1], argv[2] == "1"
    extra = argv[3:]
    failures = []
    with tempfile.TemporaryDirectory(prefix="rollout-backend-") as out:
        r = run([ringkv, "rollout", "--backend", "cuda", "--frames", "40", "--json", "--out", out]
                + extra)
        b = run([ringkv, "bench", "--backend", "cuda", "--quick", "--json"])
        bad = run([ringkv, "rollout", "--backend", "tpu", "--frames", "1", "--out", out])
    if bad.returncode != 2 or "cpu or cuda" not in bad.stderr:
        failures.append(f"--backend tpu: status {bad.returncode}, stderr {bad.stderr.strip()!r}")
    for name, p in (("rollout", r), ("bench", b)):
        err = p.stderr.strip()
        if not built:
            if p.returncode != 2 or NO_CUDA not in err:
                failures.append(f"{name} --backend cuda without CUDA: status {p.returncode}, "
                                f"stderr {err!r} (expected 2, {NO_CUDA!r})")
            else:
                print(f"  {name}: refused as expected: {err}")
        elif p.returncode == 1 and NO_GPU in err:
            if p.stdout.strip():
                failures.append(f"{name}: no GPU, but stdout is not empty: {p.stdout[:200]!r}")
            print(f"  {name}: no GPU here, failed cleanly: {err}")
        elif p.returncode != 0:
            failures.append(f"{name} --backend cuda: status {p.returncode}, stderr {err[-2000:]!r}")
        elif name == "rollout":
            j = json.loads(p.stdout)
            if j.get("last_frame") != 39:
                failures.append(f"rollout on the GPU: last_frame {j.get('last_frame')}")
            if not re.fullmatch(r"[0-9a-f]{16}", str(j.get("output_digest"))):
                failures.append(f"rollout on the GPU: output_digest {j.get('output_digest')!r}")
            if j.get("isa") is not None or not j.get("attention_plans"):
                failures.append(f"rollout on the GPU: isa {j.get('isa')!r} (expected null), "
                                f"attention_plans {j.get('attention_plans')!r}")
            near = j["recall_rate"]["local"]["near"]
            if near is None or near < 0.9:
                failures.append(f"rollout on the GPU: local near recall {near} < 0.9")
            print(f"  rollout on the GPU: digest {j.get('output_digest')}, local near {near}, "
                  f"plans {j.get('attention_plans')}")
        else:
            rows = [json.loads(line) for line in p.stdout.splitlines() if line.strip()]
            if not any(x.get("name") == "cuda_attention_tflops" for x in rows):
                failures.append("bench on the GPU: no cuda_attention_tflops row")
            for x in rows:
                print(f"  {x.get('name')}: {x.get('value')} {x.get('unit')}")
    if failures:
        for f in failures:
            print("FAIL:", f)
        raise SystemExit(1)
    print("PASS: --backend cuda " + ("works or fails cleanly" if built else "is refused"))


if __name__ == "__main__":
    main(sys.argv)
