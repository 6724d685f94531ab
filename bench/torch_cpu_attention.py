#!/usr/bin/env python3
"""PyTorch's CPU attention on the same problem as `ringkv bench`'s
attention_gflops row: one session row of a Waypoint-1.5 360P local layer in
steady state (2,048 visible keys gathered into a dense tensor; 32 query heads,
16 KV heads, d_head 64, 128 queries), f32 and bf16, through
torch.nn.functional.scaled_dot_product_attention.

Not a dependency of the library: run it where torch is installed, next to
`ringkv bench --json` in the same session, and record both in RESULTS.md.
Prints one JSON object per line (name, value, unit, dtype, threads)."""
import json
import sys
import time

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print(json.dumps({"name": "torch_cpu_attention_gflops", "skipped": "torch not importable"}))
    sys.exit(0)


def main() -> None:
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else torch.get_num_threads()
    torch.set_num_threads(threads)
    hq, hkv, d, t, keys = 32, 16, 64, 128, 2048
    flops = 4.0 * t * keys * d * hq
    for dtype in (torch.float32, torch.bfloat16):
        g = torch.Generator().manual_seed(0)
        q = torch.randn(1, hq, t, d, generator=g).to(dtype)
        k = torch.randn(1, hkv, keys, d, generator=g).to(dtype)
        v = torch.randn(1, hkv, keys, d, generator=g).to(dtype)
        # GQA by repeating KV heads (enable_gqa where available)
        kk, vv = k.repeat_interleave(hq // hkv, 1), v.repeat_interleave(hq // hkv, 1)
        for _ in range(3):
            F.scaled_dot_product_attention(q, kk, vv)
        best = float("inf")
        for _ in range(20):
            t0 = time.perf_counter()
            F.scaled_dot_product_attention(q, kk, vv)
            best = min(best, time.perf_counter() - t0)
        print(json.dumps({"name": "torch_cpu_attention_gflops", "value": round(flops / best / 1e9, 3),
                          "unit": "GFLOP/s", "dtype": str(dtype).replace("torch.", ""),
                          "threads": threads, "torch": torch.__version__}))


def matmul_ceiling(threads: int) -> None:
    """The bf16 matrix rate torch reaches on this CPU (AMX where present): a
    fairer ceiling for bf16 attention than OpenBLAS's f32 sgemm."""
    torch.set_num_threads(threads)
    n = 2048
    a = torch.randn(n, n).to(torch.bfloat16)
    b = torch.randn(n, n).to(torch.bfloat16)
    for _ in range(3):
        a @ b
    best = float("inf")
    for _ in range(10):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    print(json.dumps({"name": "torch_cpu_bf16_matmul_gflops", "value": round(2.0 * n ** 3 / best / 1e9, 3),
                      "unit": "GFLOP/s", "dtype": "bfloat16", "n": n, "threads": threads,
                      "torch": torch.__version__}))


if __name__ == "__main__":
    main()
    matmul_ceiling(int(sys.argv[1]) if len(sys.argv) > 1 else torch.get_num_threads())
