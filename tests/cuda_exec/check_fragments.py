#!/usr/bin/env python3
"""Two readings of the PTX ISA must agree (issue 21).

Runs tests/cuda_exec/exec_fragments (the wrappers of src/cuda/ptx.cuh on the
CPU executor: their semantics as written from the ISA) and recomputes every
output from the inputs with tests/cuda/fragment_model.py, the second,
independent reading of the same fragment layouts (ldmatrix, mma.m16n8k16,
the wgmma descriptors and register fragments). Integer results must be equal
bit for bit, matrix products within 1e-6 relative (float64 model, f32
results).

Usage: check_fragments.py EXEC_FRAGMENTS_BINARY
"""
import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cuda"))
import fragment_model as fm  # noqa: E402


def bf16(bits):
    """bf16 bit patterns (ints) as float64 values."""
    u = np.asarray(bits, dtype=np.uint32) << 16
    return u.view(np.float32).astype(np.float64)


def pair(word):
    return tuple(bf16([word & 0xFFFF, word >> 16]))


def close(got, want, what):
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    err = np.abs(got - want).max() / max(1.0, np.abs(want).max())
    if err > 1e-6:
        print(f"MISMATCH {what}: worst relative difference {err:.3e}")
        return 1
    return 0


def check_ldmatrix(case):
    smem = np.arange(64 * 8)
    regs = fm.ldmatrix_x4(smem, case["addrs"], trans=bool(case["trans"]))
    bad = 0
    for lane in range(32):
        for i in range(4):
            word = case["out"][lane * 4 + i]
            lo, hi = regs[lane][i]
            if (word & 0xFFFF, word >> 16) != (int(lo), int(hi)):
                if bad < 3:
                    print(f"MISMATCH ldmatrix trans={case['trans']} lane {lane} reg {i}: "
                          f"executor ({word & 0xFFFF}, {word >> 16}), model ({lo}, {hi})")
                bad += 1
    return bad


def check_mma(case):
    a = [[pair(case["a"][lane * 4 + i]) for i in range(4)] for lane in range(32)]
    b0 = [pair(case["b"][lane * 2]) for lane in range(32)]
    b1 = [pair(case["b"][lane * 2 + 1]) for lane in range(32)]
    c = [case["c"][lane * 4: lane * 4 + 4] for lane in range(32)]
    want = fm.mma(c, a, b0, b1)
    return close(case["d"], [v for lane in want for v in lane], "mma.m16n8k16")


def check_wgmma(case):
    smem = bf16(case["smem"])  # 16-bit elements from the 1024-aligned tile base
    frags_d = [[case["d"][(w * 32 + lane) * 32: (w * 32 + lane) * 32 + 32] for lane in range(32)]
               for w in range(4)]
    got = fm.acc_to_mat(frags_d, 64)
    if case["rs"]:
        a = fm.afrag_to_mat([[[pair(case["a"][((w * 32 + lane) * 4) + i]) for i in range(4)]
                              for lane in range(32)] for w in range(4)])
        b = fm.desc_mnmajor(smem, case["b_start"], case["b_sbo"], case["b_lbo"])
    else:
        a = fm.desc_kmajor(smem, case["a_start"], case["a_sbo"], 64)
        b = fm.desc_kmajor(smem, case["b_start"], case["b_sbo"], 64).T  # [N][k16] -> K x N
    want = a @ b
    if case["scale_d"]:
        frags_c = [[case["c"][(w * 32 + lane) * 32: (w * 32 + lane) * 32 + 32]
                    for lane in range(32)] for w in range(4)]
        want = want + fm.acc_to_mat(frags_c, 64)
    return close(got, want, f"wgmma m64n64k16 {'rs' if case['rs'] else 'ss'}")


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    run = subprocess.run([sys.argv[1]], check=True, capture_output=True, text=True)
    data = json.loads(run.stdout)
    bad = 0
    counts = {}
    for kind, check in (("ldmatrix", check_ldmatrix), ("mma", check_mma), ("wgmma", check_wgmma)):
        for case in data.get(kind, []):
            bad += check(case)
            counts[kind] = counts.get(kind, 0) + 1
    print(f"fragments: {counts} cases compared with tests/cuda/fragment_model.py, "
          f"{bad} mismatches")
    if not counts.get("ldmatrix") or not counts.get("mma"):
        print("fragments: a kind of case is missing")
        bad += 1
    print("fragment agreement:", "PASS" if bad == 0 else "FAIL")
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
