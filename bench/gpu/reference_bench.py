#!/usr/bin/env python3
"""The reference side of the GPU benchmark (issue 4), run by
scripts/gpu_check.sh in the same call as bench_cuda, at the 720P geometry:

  - ceilings: device-to-device copy bandwidth, bf16 8192^3 matrix product;
  - the reference module (seed_ring_cache.LayerRingCache, copied into .gpu/
    by `scripts/gpu_check.sh --prepare`): upsert eager and inside a CUDA
    graph, B = 1 and B = 8;
  - attention peers on the same K/V: cuDNN SDPA on the visible keys gathered
    into a dense tensor beforehand (the gather is not timed), PyTorch's
    flash SDPA likewise, and compiled FlexAttention over the whole ring with
    a BlockMask built once from the visibility rows (its build timed apart).

TFLOP/s count 4 * Tq * visible keys * D * Hq * B. Prints one line per
measurement: RESULT bench=ref_<name> value=<v> unit=<u> [notes]. With
--jsonl FILE each is also appended to FILE as one JSON object in the row
format of `ringkv bench --json` (name, value, unit, the notes' key=value
pairs as keys, backend "torch", card, git_commit from $RKV_COMMIT, source), so
that the anchors sit beside the GPU bench's rows in bench/gpu/h200.jsonl.
Each measurement is guarded: a failure prints value=nan with the error and
the script goes on. --budget S stops starting new FlexAttention
compilations after S seconds.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, ".gpu"))

T0 = time.time()
ROWS = {"path": None, "card": "cpu"}  # --jsonl FILE, the GPU's name


def _note_value(v):
    v = v.strip('"')
    try:
        return int(v)
    except ValueError:
        try:
            return float(v)
        except ValueError:
            return v


def result(name, value, unit, note=""):
    print(f"RESULT bench=ref_{name} value={value:.4g} unit={unit} {note}".rstrip(), flush=True)
    if ROWS["path"]:
        import re
        row = {"name": f"ref_{name}", "value": None if math.isnan(value) else round(value, 3),
               "unit": unit}
        row.update({k: _note_value(v) for k, v in re.findall(r'(\w+)=("[^"]*"|\S+)', note)})
        row.update(backend="torch", card=ROWS["card"],
                   git_commit=os.environ.get("RKV_COMMIT") or "unknown",
                   source="bench/gpu/reference_bench.py")
        with open(ROWS["path"], "a") as f:
            f.write(json.dumps(row) + "\n")


def guarded(name, unit):
    def deco(fn):
        def run(*a, **k):
            try:
                return fn(*a, **k)
            except Exception as e:  # keep going: the table says what failed
                msg = f"{type(e).__name__}: {e}".replace("\n", " ")[:300]
                result(name, math.nan, unit, f'error="{msg}"')
                traceback.print_exc(limit=3)
                return None
        return run
    return deco


def timed_ms(torch, fn, reps=20, warmup=3):
    """Median of CUDA-event timings of fn() (wall clock on the CPU)."""
    for _ in range(warmup):
        fn()
    if not torch.cuda.is_available():
        ts = []
        for _ in range(reps):
            t = time.perf_counter()
            fn()
            ts.append((time.perf_counter() - t) * 1e3)
        return statistics.median(ts)
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        e0 = torch.cuda.Event(enable_timing=True)
        e1 = torch.cuda.Event(enable_timing=True)
        e0.record()
        fn()
        e1.record()
        e1.synchronize()
        ts.append(e0.elapsed_time(e1))
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", type=float, default=150.0)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--jsonl", metavar="FILE",
                    help="also append each measurement to FILE as a JSON row")
    ap.add_argument("--smoke", action="store_true",
                    help="tiny sizes on the CPU: exercises the code paths, times nothing useful")
    args = ap.parse_args()
    reps = 1 if args.smoke else 5 if args.quick else 20

    import torch
    import torch.nn.functional as F

    if not torch.cuda.is_available() and not args.smoke:
        print("reference_bench: SKIP (torch sees no CUDA device)")
        return 77
    dev = torch.device("cpu" if args.smoke else "cuda")
    ROWS["path"] = args.jsonl
    ROWS["card"] = "cpu" if args.smoke else torch.cuda.get_device_name(0)
    bf16 = torch.bfloat16
    print(f"reference_bench: torch {torch.__version__}, "
          f"{'CPU smoke run' if args.smoke else torch.cuda.get_device_name(0)}", flush=True)
    try:
        from seed_ring_cache import LayerRingCache
    except Exception as e:
        print(f"reference_bench: cannot import .gpu/seed_ring_cache.py ({e}); "
              "run scripts/gpu_check.sh --prepare where ../shared exists", flush=True)
        LayerRingCache = None

    # ---- ceilings --------------------------------------------------------------
    @guarded("copy_d2d_bandwidth", "GB/s")
    def copy_bw():
        a = torch.randn(1 << (16 if args.smoke else 29), device=dev, dtype=torch.float16)
        b = torch.empty_like(a)
        ms = timed_ms(torch, lambda: b.copy_(a), reps)
        result("copy_d2d_bandwidth", 2 * a.numel() * 2 / (ms * 1e-3) / 1e9, "GB/s",
               f"ms={ms:.3f} (read+written)")

    @guarded("matmul_bf16_8192", "TFLOP/s")
    def matmul():
        n = 256 if args.smoke else 8192
        a = torch.randn(n, n, device=dev, dtype=bf16)
        b = torch.randn(n, n, device=dev, dtype=bf16)
        ms = timed_ms(torch, lambda: a @ b, max(5, reps // 2))
        result("matmul_bf16_8192", 2 * n ** 3 / (ms * 1e-3) / 1e12, "TFLOP/s", f"ms={ms:.3f}")

    copy_bw()
    matmul()

    # ---- the reference upsert --------------------------------------------------
    S, H, RF, D, HQ = (2, 2, 4, 64, 4) if args.smoke else (8, 16, 16, 64, 32)
    T720, T360 = (256, 128) if args.smoke else (512, 128)

    def make_cache(T, PD):
        c = LayerRingCache(S, H, RF, RF, D, T, PD, bf16, dev)
        c.kv.normal_()
        c.written.fill_(True)
        return c

    @guarded("upsert", "us/call")
    def upserts():
        if LayerRingCache is None:
            raise RuntimeError("reference module missing")
        c = make_cache(T720, 1)
        for B in (1, S):
            kv = torch.randn(2, 1, H, B * T720, D, device=dev, dtype=bf16)
            fp = torch.arange(40, 40 + B, device=dev, dtype=torch.int64)
            si = torch.arange(B, device=dev, dtype=torch.int64)
            for commit in (False, True):
                ms = timed_ms(torch, lambda: c.upsert(kv, fp, commit, si, build_visibility=False),
                              reps)
                result(f"upsert_eager_B{B}_commit{int(commit)}", ms * 1e3, "us/call")
                if args.smoke:
                    continue
                # inside a CUDA graph (captured once, replayed)
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    for _ in range(3):
                        c.upsert(kv, fp, commit, si, build_visibility=False)
                torch.cuda.current_stream().wait_stream(s)
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    c.upsert(kv, fp, commit, si, build_visibility=False)
                ms = timed_ms(torch, g.replay, reps)
                result(f"upsert_graph_B{B}_commit{int(commit)}", ms * 1e3, "us/call")
        del c
        if not args.smoke:
            torch.cuda.empty_cache()

    upserts()

    # ---- attention peers ---------------------------------------------------------
    def visibility(c, B, f):
        """[B, N] bool rows by the bits-and-clock rule (SEM 4), session b."""
        T, C, N = c.tokens_per_frame, c.capacity, c.total_slots
        vis = torch.zeros(B, N, dtype=torch.bool, device=dev)
        for b in range(B):
            lo = b * C
            vis[b, lo:lo + C] = c.written[lo:lo + C]
            if f % c.pinned_dilation == 0:
                slot = (f // c.pinned_dilation) % c.ring_buckets
                vis[b, lo + slot * T: lo + (slot + 1) * T] = False
        return vis

    cases = [  # name, T, PD, B, clock
        ("720p_B1_8192keys", T720, 1, 1, 1000),
        ("720p_B8_8704keys", T720, 8, S, 1001),
        ("360p_B8_2176keys", T360, 8, S, 1001),
    ]
    flex_holder = [None]  # the compiled flex_attention, shared by the cases
    for name, T, PD, B, f in cases:
        try:
            if LayerRingCache is not None:
                c = make_cache(T, PD)
                kvbuf, Nslots = c.kv, c.total_slots
            else:  # same layout without the module
                Nslots = S * (RF + 1) * T
                kvbuf = torch.randn(2, 1, H, Nslots, D, device=dev, dtype=bf16)

                class _C:  # minimal stand-in for visibility()
                    pass
                c = _C()
                c.tokens_per_frame, c.capacity, c.total_slots = T, (RF + 1) * T, Nslots
                c.pinned_dilation, c.ring_buckets = PD, RF
                c.written = torch.ones(Nslots, dtype=torch.bool, device=dev)
            k, v = kvbuf.unbind(0)  # [1, H, N, D] views, no copy
            vis = visibility(c, B, f)
            keys = int(vis[0].sum().item())
            q = torch.randn(B, HQ, T, D, device=dev, dtype=bf16)
            flop = 4.0 * T * keys * D * HQ * B
            idx = [vis[b].nonzero().squeeze(1) for b in range(B)]
            kg = torch.stack([k[0][:, i] for i in idx])  # [B, H, keys, D] gathered
            vg = torch.stack([v[0][:, i] for i in idx])
            kg_r = kg.repeat_interleave(HQ // H, dim=1)
            vg_r = vg.repeat_interleave(HQ // H, dim=1)
        except Exception as e:
            result(f"attention_setup_{name}", math.nan, "-", f'error="{e}"')
            continue
        from torch.nn.attention import SDPBackend, sdpa_kernel

        backends = ((("math", SDPBackend.MATH),) if args.smoke else
                    (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)))
        outs = {}
        for label, backend in backends:
            @guarded(f"{label}_gathered_{name}", "TFLOP/s")
            def sdpa():
                with sdpa_kernel(backend):
                    try:
                        fn = lambda: F.scaled_dot_product_attention(q, kg, vg, enable_gqa=True)
                        fn()
                        how = "enable_gqa"
                    except Exception:
                        fn = lambda: F.scaled_dot_product_attention(q, kg_r, vg_r)
                        fn()
                        how = "heads repeated"
                    ms = timed_ms(torch, fn, reps)
                    outs.setdefault("gathered", fn().float())
                result(f"{label}_gathered_{name}", flop / (ms * 1e-3) / 1e12, "TFLOP/s",
                       f"us={ms * 1e3:.1f} keys={keys} gqa={how.replace(' ', '_')}")
            sdpa()

        @guarded(f"flex_{name}", "TFLOP/s")
        def flex_case():
            if time.time() - T0 > args.budget:
                raise RuntimeError(f"skipped: over the {args.budget:.0f} s budget")
            from torch.nn.attention.flex_attention import create_block_mask, flex_attention
            if flex_holder[0] is None:
                flex_holder[0] = torch.compile(flex_attention, dynamic=False)
            fx = flex_holder[0]

            def mask_mod(b, h, q_idx, kv_idx):
                return vis[b, kv_idx]

            t = time.time()
            bm = create_block_mask(mask_mod, B=B, H=None, Q_LEN=T, KV_LEN=Nslots, device=dev)
            if not args.smoke:
                torch.cuda.synchronize()
            build_ms = (time.time() - t) * 1e3
            kb = k.expand(B, -1, -1, -1)
            vb = v.expand(B, -1, -1, -1)
            fn = lambda: fx(q, kb, vb, block_mask=bm, enable_gqa=True)
            t = time.time()
            fn()
            if not args.smoke:
                torch.cuda.synchronize()
            compile_s = time.time() - t
            ms = timed_ms(torch, fn, reps)
            err = "-"
            if "gathered" in outs:  # the two peers must agree (same keys, same mask)
                o, r = fn().float(), outs["gathered"]
                err = f"{((o - r).norm() / r.norm()).item():.2e}"
            result(f"flex_{name}", flop / (ms * 1e-3) / 1e12, "TFLOP/s",
                   f"us={ms * 1e3:.1f} keys={keys} mask_build_ms={build_ms:.1f} "
                   f"first_call_s={compile_s:.1f} vs_gathered_err={err}")

        flex_case()
        kg = vg = kg_r = vg_r = q = None  # free before the next case
        if LayerRingCache is not None:
            del c
        if not args.smoke:
            torch.cuda.empty_cache()

    result("seconds", time.time() - T0, "s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
