"""``ThreadPool``: the CPU worker threads attention runs on
(``rkv_threadpool``). Threads are created once and reused by every call;
outputs are bit-identical whatever the thread count. Without a pool the
library uses a process-wide one sized to the machine's cores."""
from __future__ import annotations

import ctypes

from ._lib import lib, require
from .errors import check

__all__ = ["ThreadPool", "attention_isa"]


class ThreadPool:
    """``ThreadPool(n_threads=0)``: ``n_threads`` threads including the
    caller's; 0 means the machine's online cores. Pass it as ``pool=`` to
    ``attend``. One pool serves one call at a time (calls are serialized).
    ValueError for n_threads < 0 or > 1024."""

    def __init__(self, n_threads: int = 0):
        self._ptr = None
        require("rkv_threadpool_create")
        ptr = ctypes.c_void_p()
        check(lib.rkv_threadpool_create(int(n_threads), ctypes.byref(ptr)))
        self._ptr = ptr.value

    @property
    def size(self) -> int:
        """Threads of the pool, the caller included."""
        return int(lib.rkv_threadpool_size(self._ptr))

    def close(self) -> None:
        """Joins the threads now (also done when the pool is collected)."""
        if getattr(self, "_ptr", None) and lib is not None:
            lib.rkv_threadpool_destroy(self._ptr)
            self._ptr = None

    def __enter__(self) -> "ThreadPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        self.close()


def attention_isa() -> str:
    """Instruction set the fast attention uses here: "amx" (AMX bf16 tiles
    for bf16 storage, AVX-512 otherwise), "avx512", "avx2" or "generic"
    (capped by the environment variable RKV_ISA), or "avx512bf16" (bf16
    storage on AVX512-BF16 dot products) when RKV_ISA=avx512bf16 asks for it."""
    require("rkv_attention_isa")
    return lib.rkv_attention_isa().decode()
