"""``ThreadPool``: the CPU worker threads attention runs on
(``rkv_threadpool``). Threads are created once and reused by every call;
outputs are bit-identical whatever the thread count. Without a pool the
library uses a process-wide one sized to the machine's cores."""
from __future__ import annotations

import ctypes

from ._args import as_int
from ._handle import HandleOwner
from ._lib import check, lib
from .errors import RingKVValueError, python_calls

__all__ = ["ThreadPool", "attention_isa"]


@python_calls("ThreadPool")
class ThreadPool(HandleOwner):
    """``ThreadPool(n_threads=0)``: ``n_threads`` threads including the
    caller's; 0 means the machine's online cores. Pass it as ``pool=`` to
    ``attend``. One pool serves one call at a time (calls are serialized).
    ValueError for n_threads < 0 or > 1024, TypeError for a non-integer.

    A pool cannot be copied or pickled (TypeError, as a ``threading.Lock``):
    it owns threads of this process. Create another ``ThreadPool(n)`` where
    one is needed."""

    _copy_hint = ("it owns threads of this process (an rkv_threadpool*); create another "
                  "ringkv.ThreadPool(n_threads) where one is needed")

    def __init__(self, n_threads: int = 0):
        self._ptr = None
        n = as_int(n_threads, "n_threads")
        if not 0 <= n <= 1024:  # checked here too: ctypes would truncate to a C int
            raise RingKVValueError(f"n_threads = {n}; expected 0 (the machine's cores) to 1024")
        ptr = ctypes.c_void_p()
        check(lib.rkv_threadpool_create(n, ctypes.byref(ptr)))
        self._ptr = ptr.value

    @property
    def size(self) -> int:
        """Threads of the pool, the caller included."""
        return int(lib.rkv_threadpool_size(self._ptr))

    def close(self) -> None:
        """Joins the threads now (also done when the pool is collected).
        Called from another thread while an ``attend`` runs on the pool, it
        waits until that call ends (calls are serialized: it never pulls
        threads from under a running call); the pool's next use is then
        refused (RingKVValueError: closed pool). Closing twice is a no-op."""
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
    for bf16 storage, AVX-512 otherwise; Intel CPUs with AMX),
    "avx512bf16" (bf16 storage on AVX512-BF16 dot products, AVX-512
    otherwise; AMD CPUs with AVX512-BF16, or RKV_ISA=avx512bf16), "avx512",
    "avx2" or "generic"; the environment variable RKV_ISA caps it
    (RKV_ISA=avx512: the AVX-512 kernel, bf16 widened to f32)."""
    return lib.rkv_attention_isa(None).decode()
