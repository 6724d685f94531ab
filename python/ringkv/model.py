"""A whole model (SEMANTICS 6, 7): one ring per transformer layer, sessions
claimed by request id, host-side frame clocks, in-memory snapshots, presets.

A frame for B sessions::

    model.begin_frame(sessions, frames)          # clock = last committed + 1
    for p in range(5):                           # 4 denoising passes + commit
        for layer in range(model.n_layers):
            model.upsert(layer, sessions, kv, commit=(p == 4))
            out = model.attend(layer, sessions, q)

``kv`` is ``[2, 1, H, B*T, D]`` (or ``[2, H, B*T, D]``) and ``q``
``[B, Hq, T, D]``, NumPy arrays or CPU torch tensors, in the model's dtype
for ``kv`` (NumPy bf16: uint16 bits).

``Model(config, device="cuda")`` is the same model on a GPU, through the
same ``rkv_model_*`` calls (see :class:`Model`; not yet run on a GPU).
"""
from __future__ import annotations

import contextlib
import ctypes
import itertools
import os
from dataclasses import asdict, astuple, dataclass
from typing import Any

import numpy as np

from . import _arrays as ar
from ._lib import RKV_MAX_LAYERS, LayerSpec as _LayerSpecStruct, ModelConfigStruct, lib
from ._lib import Geometry as _GeometryStruct
from ._lib import SessionRegion as _RegionStruct
from ._lib import SnapshotInfo as _SnapshotInfoStruct
from ._lib import check, cuda as _cuda_lib, error_for
from .attention import _scale, prepare
from ._args import (as_bytes, as_flag, as_instance, as_int, as_path, as_request_id, as_session,
                    as_text, short_repr)
from ._handle import (LIVE_MODELS, CopiedByValue, HandleOwner, OwnedHandle, check_state, extras,
                      malformed_state)
from .errors import (RingKVArrayError, RingKVDeviceError, RingKVError, RingKVIndexError,
                     RingKVRuntimeError, RingKVTypeError, RingKVValueError, python_call,
                     python_calls)
from .layer import LayerGeometry, LayerRingCache, _cuda_device, _parse_device, _torch_ops

__all__ = ["LayerSpec", "ModelConfig", "Model", "SessionRegion", "SnapshotInfo", "preset",
           "preset_names", "inspect_snapshot"]


@dataclass(frozen=True)
class LayerSpec:
    """Per-layer ring shape: RF, RB, PD."""
    ring_frames: int
    ring_buckets: int
    pinned_dilation: int


_SIZES = ("num_sessions", "n_q_heads", "n_kv_heads", "d_head", "tokens_per_frame",
          "max_offloaded")  # ModelConfig's integer fields, as rkv_model_config's


@python_calls("ModelConfig")
@dataclass
class ModelConfig:
    """``rkv_model_config``: the layers' ring shapes and the shared sizes.
    ``dtype`` is "f32", "f16" or "bf16" (any spelling ``LayerRingCache``
    accepts is normalized)."""
    name: str
    layers: list[LayerSpec]
    num_sessions: int
    n_q_heads: int
    n_kv_heads: int
    d_head: int
    tokens_per_frame: int
    dtype: str = "f32"
    #: paged-out sessions whose request ids the model keeps reserved
    #: (:meth:`Model.offload`); 0: the default, max(16, 4 * num_sessions).
    #: Not geometry: snapshots neither store nor compare it.
    max_offloaded: int = 0

    def _struct(self) -> ModelConfigStruct:
        name = as_text(self.name, "ModelConfig.name")
        if (not isinstance(self.layers, (list, tuple))
                or not all(isinstance(spec, LayerSpec) for spec in self.layers)):
            raise RingKVTypeError("ModelConfig.layers must be a list of ringkv.LayerSpec; got "
                                  + short_repr(self.layers, 120))
        if not 1 <= len(self.layers) <= RKV_MAX_LAYERS:
            raise RingKVValueError(f"a model has 1..{RKV_MAX_LAYERS} layers; got "
                                   f"{len(self.layers)}")
        if len(name) >= 64:
            raise RingKVValueError(f"model name {self.name!r} is longer than 63 bytes")
        c = ModelConfigStruct()
        c.name = name
        c.n_layers = len(self.layers)
        for i, spec in enumerate(self.layers):
            c.layers[i] = _LayerSpecStruct(*(as_int(getattr(spec, f), f) for f, _ in
                                             _LayerSpecStruct._fields_))
        for size in _SIZES:
            setattr(c, size, as_int(getattr(self, size), size))
        c.dtype = ar.parse_dtype(self.dtype)
        return c

    @classmethod
    def _from_struct(cls, c: ModelConfigStruct) -> "ModelConfig":
        return cls(name=c.name.decode(), dtype=ar.DTYPE_NAMES[c.dtype],
                   layers=[LayerSpec(*(int(getattr(x, f)) for f, _ in x._fields_))
                           for x in c.layers[:c.n_layers]],
                   **{size: int(getattr(c, size)) for size in _SIZES})

    @property
    def n_layers(self) -> int:
        return len(self.layers)

    def layer_geometry(self, layer: int) -> LayerGeometry:
        """Geometry of layer ``layer`` (S, H, D, T, dtype from the config)."""
        g = _GeometryStruct()
        check(lib.rkv_model_config_layer_geometry(ctypes.byref(self._struct()),
                                                  as_int(layer, "layer"), ctypes.byref(g)))
        return LayerGeometry(*(getattr(g, f) for f, _ in g._fields_[:7]),
                             ar.DTYPE_NAMES[g.dtype])

    def memory(self) -> tuple[int, int]:
        """``(per_session_bytes, total_bytes)`` of resident K/V over all layers;
        ValueError for an invalid config."""
        per, total = ctypes.c_size_t(), ctypes.c_size_t()
        check(lib.rkv_model_config_memory(ctypes.byref(self._struct()), ctypes.byref(per),
                                          ctypes.byref(total)))
        return per.value, total.value


def preset_names() -> list[str]:
    """Names of the presets ("demo", "waypoint-1.5-720p", "waypoint-1.5-360p")."""
    return [n.decode() for n in itertools.takewhile(bool, lib.rkv_model_preset_names())]


@python_call("ringkv.preset")
def preset(name: str, full_global_ring: bool = False, *, num_sessions: int = 1) -> ModelConfig:
    """The named preset's config (SEMANTICS 7); ``full_global_ring`` allocates
    the original RF 128 for global layers. KeyError for an unknown name."""
    raw = as_text(name, "name")
    c = ModelConfigStruct()
    full = as_flag(full_global_ring, "full_global_ring")
    check(lib.rkv_model_preset(raw, 1 if full else 0, ctypes.byref(c)))
    cfg = ModelConfig._from_struct(c)
    cfg.num_sessions = as_int(num_sessions, "num_sessions")
    return cfg


class _ModelHandle(OwnedHandle):
    """Owns an ``rkv_model*`` (``rkv_model_destroy``); the model's borrowed
    layers keep it alive, and it keeps ``owner`` (a CUDA model's torch
    stream) alive until the model is destroyed (which waits for that
    stream)."""

    __slots__ = ()
    _copy_hint = ("it holds an rkv_model* (an address in this process); copy or pickle the "
                  "Model instead")


class _CudaPlace:
    """Where a CUDA model runs: GPU ``tdevice``, the torch stream its calls
    are enqueued on (``stream``; ``stream_id`` its cudaStream_t as an int)
    and torch. Holds no C handle (the stream is torch's). Not yet run on a
    GPU."""

    __slots__ = ("torch", "tdevice", "stream", "stream_id")

    def __init__(self, device: Any, index: int | None, stream: Any):
        where = _cuda_device(device, index)  # RuntimeError without torch, CUDA or a GPU
        self.torch = torch = ar.torch_module()
        self.tdevice = torch.device(where)
        if stream is None:
            stream = torch.cuda.current_stream(self.tdevice)
        elif not isinstance(stream, torch.cuda.Stream):
            raise RingKVTypeError(f"stream must be a torch.cuda.Stream; got {stream!r}")
        if stream.device != self.tdevice:
            raise RingKVDeviceError(f"ringkv: stream is on {stream.device}, but the model is on "
                                    f"{self.tdevice}")
        self.stream = stream
        self.stream_id = int(stream.cuda_stream)

    def check_stream(self, what: str) -> None:
        """The per-pass calls take torch tensors made on torch's current
        stream: it must be the model's (RingKVRuntimeError otherwise)."""
        cur = int(self.torch.cuda.current_stream(self.tdevice).cuda_stream)
        if cur != self.stream_id:
            raise RingKVRuntimeError(
                f"ringkv: {what}: the model enqueues its work on its own stream "
                f"({self.stream_id:#x}: torch's current stream on {self.tdevice} when it was "
                f"created, or the one given), but torch's current stream there is now {cur:#x}; "
                "call it under `with torch.cuda.stream(model.stream):` (or create the model "
                "with stream=)")


@python_calls("Model")
class Model(CopiedByValue):
    """Every layer's ring of a model, with sessions and clocks (SEMANTICS 6).

    ``Model(config)`` or ``Model.from_preset("waypoint-1.5-720p",
    num_sessions=4)``. ``array_kind`` ("numpy" or "torch") chooses the kind of
    the layers' ``kv``/``written`` views; ``upsert`` returns views of the kind
    of its ``kv`` input.

    ``device``: "cpu" (default), or "cuda", "cuda:N" or a
    ``torch.device("cuda", N)``: the same model on that GPU
    (``rkv_model_create_cuda``, needs ``libringkv_cuda.so`` and torch with
    CUDA; not yet run on a GPU: no GPU run is recorded; python/README.md,
    "A whole model on the GPU"). Every call is the same ``rkv_model_*``
    call as on the CPU (a session saved on one backend loads on the other,
    bit-exact); ``kv``, ``q`` and ``out`` are torch CUDA tensors on its GPU,
    ``session_idx`` and ``frame_pos`` host data (a CUDA tensor is copied to
    the host, which waits for it); ``pool`` does not apply. The work is
    enqueued on ``stream`` (a ``torch.cuda.Stream`` of that GPU; default:
    torch's current stream there at creation) without waiting; ``upsert``,
    ``attend`` and ``step`` must be made while it is torch's current stream
    (RuntimeError otherwise); a frame's per-pass calls can be captured in
    ``torch.cuda.graph(g, stream=model.stream)`` after ``begin_frame``;
    :meth:`synchronize` waits and raises what the kernels recorded.

    ``copy.copy``, ``copy.deepcopy`` and ``pickle`` give a new model with
    equal contents on the same device (see :meth:`_state`).
    """

    def __init__(self, config: ModelConfig, *, array_kind: str | None = None,
                 device: Any = "cpu", stream: Any = None):
        as_instance(config, ModelConfig, "config")
        kind, index = _parse_device(device, array_kind, "model")
        cfg = config._struct()
        ptr = ctypes.c_void_p()
        self._place = place = None
        if kind == "cuda":  # rkv_model_create_cuda: not yet run on a GPU
            self._place = place = _CudaPlace(device, index, stream)
            with place.torch.cuda.device(place.tdevice):
                check(_cuda_lib().rkv_model_create_cuda(ctypes.byref(cfg), place.tdevice.index,
                                                        place.stream_id, ctypes.byref(ptr)))
            array_kind = ar.TORCH
        elif stream is not None:
            raise RingKVValueError("stream applies to a CUDA model (device='cuda')")
        else:
            check(lib.rkv_model_create(ctypes.byref(cfg), ctypes.byref(ptr)))
        self._h = _ModelHandle(ptr.value, place and place.stream, lib.rkv_model_destroy)
        self.config = ModelConfig._from_struct(lib.rkv_model_get_config(self._h.ptr).contents)
        self.array_kind = array_kind = ar.NUMPY if array_kind is None else array_kind
        self.device = "cpu" if place is None else str(place.tdevice)
        self._layers = [LayerRingCache._borrow(lib.rkv_model_layer(self._h.ptr, i), self._h,
                                               array_kind, self.device)
                        for i in range(self.config.n_layers)]
        LIVE_MODELS[self._h.ptr] = self  # the key the model ops take (ringkv.ops.model_key)

    @classmethod
    def from_preset(cls, name: str, *, num_sessions: int = 1, full_global_ring: bool = False,
                    array_kind: str | None = None, device: Any = "cpu",
                    stream: Any = None) -> "Model":
        return cls(preset(name, full_global_ring, num_sessions=num_sessions),
                   array_kind=array_kind, device=device, stream=stream)

    @property
    def stream(self) -> Any:
        """A CUDA model's ``torch.cuda.Stream`` (its work is enqueued there);
        None on the CPU."""
        return None if self._place is None else self._place.stream

    def _on_device(self) -> Any:
        """The model's GPU as torch's current device for one call (the C
        calls require it and never change it); nothing on the CPU."""
        if self._place is None:
            return contextlib.nullcontext()
        return self._place.torch.cuda.device(self._place.tdevice)

    def _call(self, fn: Any, *args: Any) -> None:
        """``fn(model, *args)``, checked, with the model's GPU current."""
        with self._on_device():
            check(fn(self._h.ptr, *args))

    def _out(self, fn: Any, *args: Any, ctype: Any = ctypes.c_int64) -> int:
        """``fn(model, *args, &out)``, checked (:meth:`_call`): ``out``'s value."""
        out = ctype()
        self._call(fn, *args, ctypes.byref(out))
        return out.value

    def _filled(self, fn: Any, session: int) -> bytearray:
        """The bytes ``fn(model, session, buf, n, &size)`` writes, asked for
        twice (``buf`` None for the size, then the bytes), the GPU current."""
        s, size = as_session(session), ctypes.c_size_t()
        with self._on_device():
            check(fn(self._h.ptr, s, None, 0, ctypes.byref(size)))
            buf = bytearray(size.value)
            check(fn(self._h.ptr, s, _c_buffer(buf), len(buf), ctypes.byref(size)))
        return buf

    def synchronize(self) -> None:
        """Waits until the model's work has run, then raises what its kernels
        recorded on the device since the last call (``rkv_model_synchronize``:
        IndexError / ValueError for a refused row, RuntimeError for a CUDA
        failure). A CPU model checks everything before it writes: no-op."""
        self._call(lib.rkv_model_synchronize)

    @property
    def n_layers(self) -> int:
        return self.config.n_layers

    @property
    def num_sessions(self) -> int:
        return self.config.num_sessions

    @property
    def memory_bytes(self) -> int:
        """Resident K/V bytes of every layer, all sessions."""
        return self.config.memory()[1]

    def layer(self, i: int) -> LayerRingCache:
        """Layer ``i``'s ring (owned by the model). Mutating it directly
        (its ``upsert``/``reset``) bypasses the model's clock checks."""
        i = as_int(i, "layer")
        if not 0 <= i < self.n_layers:
            raise RingKVIndexError(f"layer {i} out of range; expected 0..{self.n_layers - 1}")
        return self._layers[i]

    # ---- copies and pickles ------------------------------------------------
    # what __init__ sets: a copy or pickle rebuilds these
    _OWN_ATTRS = frozenset({"_h", "config", "array_kind", "_layers", "_place", "device"})

    def _copy(self) -> "Model":
        """A new, independent model with equal contents (see :meth:`_state`)."""
        return _model_from_state(type(self), self._state("copy"))

    def __reduce__(self) -> tuple:
        """Pickles by value (see :meth:`_state`): no address, only the config,
        the claim table and each held session's portable snapshot image."""
        return (_model_from_state, (type(self), self._state("pickle")),
                extras(self, self._OWN_ATTRS))

    def _state(self, action: str) -> dict:
        """The model by value, for copies and pickles: the config, the array
        kind, the device, and for each held session its index, request id
        and snapshot image (:meth:`save_session_bytes`: every layer's K/V
        span and written bits, and the clock; portable across processes and
        machines; a CUDA model's copy runs on torch's current stream there).
        Sessions not held are empty (a release zeroes them) and are not
        stored. RingKVRuntimeError, naming the session, when a session is
        inside a frame (images are taken between frames only), a slot is
        reserved for an import or a session is paged out (:meth:`offload`):
        a reservation would not survive the copy, so it is refused rather
        than dropped."""
        paged_out = self.offloaded_count
        if paged_out:
            raise RingKVRuntimeError(
                f"cannot {action} a ringkv.Model while {paged_out} session(s) are paged out "
                "(Model.offload): the copy could not hold their reservations (their request ids "
                "would be free there and their images would not page in); page them in "
                "(Model.page_in) or discard them (Model.offload_discard) first")
        sessions = []
        last = ctypes.c_int64()
        for s in range(self.num_sessions):
            status = lib.rkv_model_clock(self._h.ptr, s, ctypes.byref(last))
            if status == _RKV_ERR_STATE:  # not claimed; reserved for an import is the
                try:                          # only other state whose regions the library lists
                    self.session_regions(s)
                except RingKVError:
                    continue
                raise RingKVRuntimeError(
                    f"cannot {action} a ringkv.Model while session {s} is reserved for an "
                    "import (Model.import_reserve): the copy could not hold the reservation; "
                    f"finish it (Model.import_session) or cancel it (Model.import_cancel) first")
            check(status)
            try:
                image = bytes(self.save_session_bytes(s))
            except RingKVRuntimeError as exc:
                if exc.status != _RKV_ERR_STATE:
                    raise
                raise RingKVRuntimeError(
                    f"cannot {action} a ringkv.Model while session {s} is inside a frame ({exc}); "
                    f"{action} it between frames, after the commit pass of every layer",
                    exc.status) from None
            info = _SnapshotInfoStruct()
            check(lib.rkv_snapshot_inspect(None, image, len(image), ctypes.byref(info)))
            sessions.append((s, info.request_id, image))  # c_char array: the raw id bytes
        config = ModelConfig._from_struct(lib.rkv_model_get_config(self._h.ptr).contents)
        return {"format": _MODEL_FORMAT, "version": _MODEL_VERSION,
                "config": {**asdict(config), "layers": [astuple(x) for x in config.layers]},
                "array_kind": self.array_kind, "device": self.device, "sessions": sessions}

    # ---- sessions ---------------------------------------------------------
    def claim(self, request_id: str) -> int:
        """A free session for ``request_id`` (the same one if it already holds
        one). RuntimeError when every session is held (no eviction)."""
        return self._out(lib.rkv_model_claim, as_request_id(request_id))

    def lookup(self, request_id: str) -> int:
        """The session held by ``request_id``; KeyError when none."""
        return self._out(lib.rkv_model_lookup, as_request_id(request_id))

    def release(self, session: int) -> None:
        """Zeroes a held session in every layer, drops its clock, frees it."""
        self._call(lib.rkv_model_release, as_session(session))

    def reset(self, session: int) -> None:
        """Zeroes a held session in every layer and drops its clock: the next
        frame may start anywhere. The session stays claimed."""
        self._call(lib.rkv_model_reset, as_session(session))

    def clock(self, session: int) -> int | None:
        """Last committed frame of a held session, None when it has no clock."""
        f = self._out(lib.rkv_model_clock, as_session(session))
        return None if f < 0 else f

    # ---- frames -----------------------------------------------------------
    def begin_frame(self, session_idx: Any, frame_pos: Any) -> None:
        """Declares the next frame of B held sessions ([B] int64 each). Each
        clock must be last committed + 1 (any clock after a claim, reset or
        restore without clock). RuntimeError (RKV_ERR_CLOCK / _STATE) otherwise,
        ValueError for a clock < 0 (as every call that takes clocks);
        nothing changes then."""
        si, fp = self._rows(session_idx), self._rows(frame_pos, "frame_pos")
        if si.shape != fp.shape:
            raise RingKVArrayError(f"session_idx has {si.shape[0]} rows; frame_pos has "
                                   f"{fp.shape[0]}")
        with self._on_device():
            status = lib.rkv_model_begin_frame(self._h.ptr, si.shape[0], si.ctypes.data,
                                               fp.ctypes.data)
        if status == _RKV_ERR_CLOCK and (fp < 0).any():
            # A negative clock is the mistake every other call reports as
            # ValueError (rkv_layer_upsert: RKV_ERR_INVALID_ARG); the model's
            # RKV_ERR_CLOCK also covers the clock rule (RuntimeError).
            err = error_for(status)
            raise RingKVValueError(str(err), status)
        check(status)

    def end_frame(self) -> None:
        """Ends the current frame: every row's clock becomes its frame_pos,
        as when the commit pass has gone through every layer
        (``rkv_model_end_frame``). How a frame replayed from a CUDA graph
        ends: the host does not see the replayed commits. Host only.
        RuntimeError when no frame was begun."""
        check(lib.rkv_model_end_frame(self._h.ptr))

    def abandon_frame(self) -> None:
        """Closes the current batch; an open frame is abandoned (no clock
        changes: every row may begin the same frame again). Host only."""
        check(lib.rkv_model_abandon_frame(self._h.ptr))

    def _rows(self, rows: Any, name: str = "session_idx") -> np.ndarray:
        """``[B]`` int64 host rows (session ids, clocks). A CUDA model's may
        be a CUDA tensor, copied to the host (which waits for it); a CPU
        model refuses device tensors."""
        if self._place is not None and ar.is_torch_tensor(rows) and rows.device.type != "cpu":
            rows = rows.cpu()
        return ar.int64_vector(rows, name, f"{name} must be a [B] int64 array; got {{got}}",
                               owner="Model")

    def _kv_input(self, lay: LayerRingCache, B: int, kv: Any) -> Any:
        """``kv`` checked against ``lay`` for B rows: the buffer the C call
        reads, on the model's device."""
        buf = ar.CBuffer(kv, "kv", device=self._place and self._place.tdevice, owner="Model")
        lay._check_kv(buf.keep, B)
        return buf

    @staticmethod
    def _op_input(lay: LayerRingCache, session_idx: Any, x: Any, name: str) -> tuple:
        """The op route's ``(ring, k, v, written)`` of ``lay`` and ``[B]``
        sessions, ``x`` checked on their device."""
        ring, k, v, written = lay.views(ar.TORCH)
        si = ar.torch_index(session_idx, "session_idx",
                            "session_idx must be a [B] int64 array; got {got}", written.device,
                            owner="Model")
        ar.check_device(x, name, written.device, "Model")
        return ring, k, v, written, si

    def upsert(self, layer: int, session_idx: Any, kv: Any, commit: bool) -> tuple[Any, Any]:
        """One upsert on ``layer`` for B sessions inside a frame, at their
        declared clocks. ``kv``: ``[2, 1, H, B*T, D]`` or ``[2, H, B*T, D]``
        in the model's dtype. Returns ``(k, v)`` ``[1, H, N, D]`` views of the
        layer's storage, of the same kind as ``kv``. When every layer has
        committed, the frame ends and the clock advances.

        A torch ``kv`` of a CPU model goes through the custom op
        ``ringkv::model_upsert`` (:mod:`ringkv.ops`) on the layer's storage
        tensors: traceable by ``torch.compile`` (call :meth:`begin_frame`
        outside the compiled function: it is host bookkeeping). A CUDA
        model: one kernel on the model's stream (see :class:`Model`)."""
        layer = as_int(layer, "layer")
        lay, commit = self.layer(layer), as_flag(commit, "commit")
        ops = _torch_ops() if self._place is None and ar.is_torch_tensor(kv) else None
        if ops is not None:
            ring, k, v, written, si = self._op_input(lay, session_idx, kv, "kv")
            lay._check_kv(kv, si.shape[0])  # the tensor as it is: nothing untraceable
            ops.model_upsert(ring, written, kv, si, self._h.ptr, layer, commit)
            return k, v
        si = self._rows(session_idx)
        buf = self._kv_input(lay, si.shape[0], kv)
        if self._place is not None:
            self._place.check_stream("upsert")
        self._call(lib.rkv_model_upsert, layer, None, si.shape[0], si.ctypes.data, buf.ptr, lay._code,
                   1 if commit else 0)
        _, k, v, _ = lay.views(buf.kind)
        return k, v

    def attend(self, layer: int, session_idx: Any, q: Any, *, scale: float | None = None,
               out: Any = None, out_dtype: Any = None, pool: Any = None) -> Any:
        """Attention on ``layer`` for B sessions at their declared clocks
        (bits-and-clock rule). ``q`` ``[B, Hq, Tq, D]``; returns ``out`` of the
        same shape and kind (dtype ``out_dtype`` or ``q``'s). ``pool``: a
        :class:`ringkv.ThreadPool` (default: the library's). A CUDA model:
        ``q`` and ``out`` torch CUDA tensors, the kernels on its stream."""
        layer = as_int(layer, "layer")
        lay = self.layer(layer)
        ops = (_torch_ops() if self._place is None and ar.is_torch_tensor(q) and pool is None
               and out is None else None)
        if ops is None:
            return self._attend(lay, layer, session_idx, None, False, q, scale, out, out_dtype,
                                pool)
        ring, _, _, written, si = self._op_input(lay, session_idx, q, "q")
        if q.ndim == 4 and q.shape[1] != self.config.n_q_heads:
            raise RingKVArrayError(f"q has n_q_heads = {q.shape[1]}; this model has "
                                   f"{self.config.n_q_heads}")
        dt = None if out_dtype is None else ar.torch_dtype(ar.parse_dtype(out_dtype))
        return ops.model_attend(ring, written, q, si, self._h.ptr, layer, _scale(scale), dt)

    def flex_block_mask(self, layer: int, session: int, frame_pos: int, *,
                        n_queries: int | None = None) -> Any:
        """A FlexAttention ``BlockMask`` for ``session`` at ``frame_pos`` on
        layer ``layer``: :func:`ringkv.flex_block_mask` of that layer (right
        in eager and compiled FlexAttention over ``model.layer(layer).kv``'s
        K/V views)."""
        from .flex import flex_block_mask
        return flex_block_mask(self.layer(layer), session, frame_pos, n_queries=n_queries)

    def step(self, layer: int, session_idx: Any, kv: Any, commit: bool, q: Any, *,
             scale: float | None = None, out: Any = None, out_dtype: Any = None,
             pool: Any = None) -> Any:
        """One pass of a batched step on ``layer``: :meth:`upsert` then
        :meth:`attend` for the same rows in one library call
        (``rkv_model_step``; everything is checked before anything is
        written). Returns ``out``."""
        layer = as_int(layer, "layer")
        lay, commit = self.layer(layer), as_flag(commit, "commit")
        return self._attend(lay, layer, session_idx, kv, commit, q, scale, out, out_dtype, pool)

    def _attend(self, lay: LayerRingCache, layer: int, session_idx: Any, kv: Any, commit: bool,
                q: Any, scale: Any, out: Any, out_dtype: Any, pool: Any) -> Any:
        """The direct attend (``kv`` None: ``rkv_model_attend``) or step
        (``rkv_model_step``) on either device: a CUDA model's ``q``, ``kv``
        and ``out`` on its GPU (``out`` made there, through torch's caching
        allocator, when not given), enqueued on its stream; host errors
        raise before anything is enqueued (not yet run on a GPU)."""
        device = None if self._place is None else self._place.tdevice
        if pool is not None and device is not None:
            raise RingKVValueError(f"pool is a CPU-backend option; this model is on {self.device}")
        si = self._rows(session_idx)
        B, step = si.shape[0], None if kv is None else self._kv_input(lay, si.shape[0], kv)
        if device is not None:
            self._place.check_stream("attend" if kv is None else "step")
        with self._on_device():
            args, out, keep = prepare(q, lay.d_head, B, out, out_dtype, scale, pool,
                                      q_heads=self.config.n_q_heads, device=device, owner="Model")
            check(lib.rkv_model_attend(self._h.ptr, layer, None, B, si.ctypes.data,
                                       ctypes.byref(args)) if step is None else
                  lib.rkv_model_step(self._h.ptr, layer, B, si.ctypes.data, step.ptr, lay._code,
                                     1 if commit else 0, ctypes.byref(args)))
        return out

    # ---- snapshots --------------------------------------------------------
    @property
    def snapshot_bytes(self) -> int:
        """Size of one session's snapshot."""
        return int(lib.rkv_model_snapshot_bytes(self._h.ptr))

    def snapshot(self, session: int) -> bytearray:
        """One held session's K/V span and written bits in every layer, the
        geometry and the clock (not inside a frame: RuntimeError)."""
        buf = bytearray(self.snapshot_bytes)
        self._call(lib.rkv_model_snapshot, as_session(session), _c_buffer(buf), len(buf))
        return buf

    def restore(self, session: int, snapshot: Any) -> None:
        """Restores a snapshot into a held session (bit-exact, clock included:
        the next frame must be the saved clock + 1). ValueError
        (RKV_ERR_FORMAT) for a buffer of another geometry; nothing changes then."""
        data = _c_buffer(as_bytes(snapshot, "snapshot"))
        self._call(lib.rkv_model_restore, as_session(session), data, len(data))

    def fork(self, src_session: int, dst_session: int) -> None:
        """Copies held session ``src_session``'s whole state (every layer and
        its clock) into held session ``dst_session``, bit-exact; both between
        frames. ValueError when src == dst."""
        self._call(lib.rkv_model_fork, as_session(src_session), as_session(dst_session))

    # ---- snapshot files (safetensors layout, docs/snapshot-format.md) ---
    def save_session(self, session: int, path: str | bytes) -> None:
        """Saves a held session (between frames) to the file ``path``,
        atomically; a symbolic link is followed (its target written, the
        link kept); OSError on input/output failure and for a ``path`` that
        exists and is not a regular file (a device, named pipe or socket:
        refused before anything is written; docs/snapshot-format.md)."""
        self._call(lib.rkv_model_save_session, as_session(session), as_path(path))

    def load_session(self, session: int, path: str | bytes) -> None:
        """Loads a snapshot file into a held session: bit-exact, saved clock
        installed. ValueError (RKV_ERR_FORMAT) for a truncated, corrupted or
        foreign file or another geometry; nothing changes then."""
        self._call(lib.rkv_model_load_session, as_session(session), as_path(path))

    def save_session_bytes(self, session: int) -> bytearray:
        """The snapshot file's image in memory."""
        return self._filled(lib.rkv_model_save_session_mem, session)

    def load_session_bytes(self, session: int, image: Any) -> None:
        """:meth:`load_session` from an image in memory (bytes-like)."""
        data = bytes(as_bytes(image, "image"))
        self._call(lib.rkv_model_restore, as_session(session), data, len(data))

    # ---- sessions that leave: offload and page-in (issue 13) --------------
    @property
    def offload_capacity(self) -> int:
        """Entries of the offload table (the resolved ``max_offloaded``)."""
        return int(lib.rkv_model_offload_capacity(self._h.ptr))

    @property
    def offloaded_count(self) -> int:
        """Sessions paged out of this model (their ids reserved)."""
        return int(lib.rkv_model_offloaded_count(self._h.ptr))

    def offload(self, session: int) -> bytearray:
        """Moves a held session (between frames) out of the model: returns
        its snapshot image (the bytes of :meth:`save_session_bytes`), frees
        its slot and keeps its request id reserved until :meth:`page_in`
        (``claim`` of that id raises RuntimeError meanwhile). RuntimeError
        (RKV_ERR_FULL) when the offload table is full; nothing changes on
        any error."""
        return self._filled(lib.rkv_model_offload, session)

    def offload_to_file(self, session: int, path: str | bytes) -> None:
        """:meth:`offload` into a snapshot file (written atomically; the slot
        is freed once the file is in place). OSError on input/output."""
        self._call(lib.rkv_model_offload_file, as_session(session), as_path(path))

    def page_in(self, image: Any) -> int:
        """Brings a paged-out session back from the image :meth:`offload`
        returned, into the lowest free slot, bit-exact, with its request id
        and clock; returns the slot. KeyError when its request is not paged
        out of this model, RuntimeError for an older image of it or no free
        slot, ValueError for a damaged image; nothing held changes then."""
        data = _c_buffer(as_bytes(image, "image"))
        return self._out(lib.rkv_model_page_in, data, len(data))

    def page_in_file(self, path: str | bytes) -> int:
        """:meth:`page_in` from a file written by :meth:`offload_to_file`."""
        return self._out(lib.rkv_model_page_in_file, as_path(path))

    def offloaded_clock(self, request_id: str) -> int | None:
        """The clock of a paged-out request (None: it had none); KeyError when
        ``request_id`` is not paged out of this model."""
        f = self._out(lib.rkv_model_offloaded_clock, as_request_id(request_id))
        return None if f < 0 else f

    def offload_discard(self, request_id: str) -> None:
        """Drops a paged-out request's reservation (its image no longer pages
        in here; ``claim`` may reuse the id). KeyError when it is not paged
        out."""
        check(lib.rkv_model_offload_discard(self._h.ptr, as_request_id(request_id)))

    # ---- sessions that move: regions, export and import (issue 13) --------
    def session_regions(self, session: int) -> list["SessionRegion"]:
        """The regions holding a session (held between frames, or a slot
        reserved by :meth:`import_reserve`), in order: per layer K of each
        head, V of each head, the written bits. End to end they are the
        session's snapshot data section. Each has a writable NumPy uint8
        view ``array`` of the memory (host regions; it keeps the model
        alive) and its address for a transfer engine. They hold the session
        until it is stepped, released or imported."""
        n = int(lib.rkv_model_session_region_count(self._h.ptr))
        arr = (_RegionStruct * n)()
        count = ctypes.c_size_t()
        self._call(lib.rkv_model_session_regions, as_session(session), arr, n, ctypes.byref(count))
        return [SessionRegion(r, self._h) for r in arr[:count.value]]

    def export_meta(self, session: int) -> bytes:
        """The session's snapshot header (docs/migration.md): the metadata that
        :meth:`import_reserve` and :meth:`import_session` check."""
        n = int(lib.rkv_model_session_meta_bytes(self._h.ptr))
        buf = ctypes.create_string_buffer(n)
        self._call(lib.rkv_model_session_export_meta, as_session(session), buf, n)
        return buf.raw

    def session_digest(self, session: int) -> int:
        """XXH3-64 of the session's regions in order (= the data_xxh3 of its
        snapshot image), of a held session or a reserved slot."""
        return self._out(lib.rkv_model_session_digest, as_session(session),
                         ctype=ctypes.c_uint64)

    def import_reserve(self, meta: Any) -> int:
        """Reserves a free slot for the session ``meta`` describes and returns
        it (fill its :meth:`session_regions`, then :meth:`import_session`).
        ValueError for metadata of another geometry or damaged, RuntimeError
        when the request is already here or there is no free slot (nothing
        changes)."""
        data = bytes(as_bytes(meta, "meta"))
        return self._out(lib.rkv_model_import_reserve, data, len(data))

    def import_check(self, session: int, meta: Any) -> None:
        """Everything :meth:`import_session` checks, changing nothing."""
        data = bytes(as_bytes(meta, "meta"))
        self._call(lib.rkv_model_import_check, as_session(session), data, len(data))

    def import_session(self, session: int, meta: Any) -> None:
        """Makes a reserved, filled slot live: held by the request id with
        the metadata's clock. A refused import changes nothing."""
        data = bytes(as_bytes(meta, "meta"))
        self._call(lib.rkv_model_session_import, as_session(session), data, len(data))

    def transfer_session(self, session: int, dst: "Model", dst_session: int) -> None:
        """The plain copy of a held session's regions into slot
        ``dst_session`` of ``dst``, reserved by ``dst.import_reserve``
        (``rkv_model_transfer_session``); reads this model only."""
        as_instance(dst, Model, "dst")
        if dst.device != self.device:
            raise RingKVDeviceError(f"transfer_session: the models are on {self.device} and "
                                    f"{dst.device}; the plain copy moves between models of one "
                                    "device (use the regions and a transfer engine across)")
        self._call(lib.rkv_model_transfer_session, as_session(session), dst._h.ptr,
                   as_session(dst_session))

    def import_cancel(self, session: int) -> None:
        """Cancels a reservation: the slot is zeroed and free again."""
        self._call(lib.rkv_model_import_cancel, as_session(session))


def _c_buffer(data: Any) -> Any:
    """A ctypes char array over ``data`` (a bytearray, or a memoryview: a
    read-only one is copied first) for a C call that takes a buffer."""
    if isinstance(data, memoryview) and data.readonly:
        data = memoryview(bytearray(data))
    return (ctypes.c_char * len(data)).from_buffer(data)


_PARTS = {0: "k", 1: "v", 2: "written"}


class SessionRegion(HandleOwner):
    """One region of a session's storage (``rkv_session_region``): ``layer``,
    ``part`` ("k", "v" or "written"), ``head``, ``address``, ``nbytes``,
    ``device`` (-1: host memory, else a CUDA device) and ``array``, a
    writable NumPy uint8 view of host memory (None for device memory) that
    keeps the model alive. It holds an address of this process, so it is
    never copied or pickled: copy ``array`` instead."""

    __slots__ = ("layer", "part", "head", "address", "nbytes", "device", "array")
    _copy_hint = ("it holds an address of this process; copy or pickle its array (the bytes) "
                  "instead")

    def __init__(self, r: _RegionStruct, owner: Any):
        self.layer, self.head = int(r.layer), int(r.head)
        self.part = _PARTS[int(r.part)]
        self.address, self.nbytes, self.device = int(r.ptr or 0), int(r.bytes), int(r.device)
        self.array = (ar.numpy_view(self.address, (self.nbytes,), np.uint8, owner)
                      if self.device < 0 else None)

    def __repr__(self) -> str:
        return (f"SessionRegion(layer={self.layer}, part={self.part!r}, head={self.head}, "
                f"nbytes={self.nbytes}, device={self.device})")

_RKV_ERR_CLOCK, _RKV_ERR_STATE = -7, -10
_MODEL_FORMAT, _MODEL_VERSION = "ringkv.Model", 1


def _model_from_state(cls: type, state: Any) -> "Model":
    """A new model from :meth:`Model._state`: the same config and array kind,
    each held session claimed at its own index for its request id and loaded
    from its image (``load_session_bytes``: validated, bit-exact, clock
    installed). Every session is then between frames with no frame begun:
    its next call is ``begin_frame(clock + 1)`` (``attend`` before that raises
    RingKVRuntimeError, as after ``load_session``). RingKVValueError for a
    state of another format or version, or an image the library refuses."""
    check_state(state, _MODEL_FORMAT, _MODEL_VERSION)
    try:
        c = dict(state["config"])
        c["layers"] = [LayerSpec(*spec) for spec in c["layers"]]
        config = ModelConfig(**c)
        held = {int(s): (bytes(rid), image) for s, rid, image in state["sessions"]}
        array_kind = state["array_kind"]
        device = state.get("device", "cpu")  # absent: a state from before CUDA models
    except (KeyError, TypeError, ValueError) as exc:
        raise malformed_state(_MODEL_FORMAT, f"{type(exc).__name__}: {exc}") from None
    self = cls.__new__(cls)
    Model.__init__(self, config, array_kind=array_kind, device=device)
    # rkv_model_claim gives the lowest free session: claim every index up to
    # the highest held one in order (a placeholder id for a gap, released
    # after), so that each session keeps its index. Verified, not assumed.
    gap_id = "ringkv-copy-gap-" + os.urandom(8).hex()
    gaps = []
    for s in range(max(held) + 1 if held else 0):
        rid = held[s][0] if s in held else f"{gap_id}-{s}".encode()
        got = self.claim(rid)
        if got != s:
            raise RingKVRuntimeError(f"rebuilding a ringkv.Model: claiming request {rid!r} gave "
                                     f"session {got}, expected {s}")
        if s not in held:
            gaps.append(s)
    for s in gaps:
        self.release(s)
    for s, (_, image) in sorted(held.items()):
        self.load_session_bytes(s, image)
    return self


@dataclass
class SnapshotInfo:
    """What a valid snapshot file holds (``rkv_snapshot_info``).
    ``request_id`` is the id as a str, decoded from UTF-8 with
    ``surrogateescape`` (as ``os.fsdecode``): a byte that is not UTF-8
    becomes a lone surrogate, so nothing is lost and two ids never read
    alike; ``request_id_bytes`` (= ``request_id.encode("utf-8",
    "surrogateescape")``) is the raw id as stored. Pass that one to
    ``Model.claim`` / ``lookup`` for such an id: they refuse a str with a
    lone surrogate, as any string UTF-8 cannot encode."""
    format_version: int
    ringkv_version: str
    request_id: str
    source_session: int
    config: ModelConfig
    last_committed: int | None
    file_bytes: int
    header_bytes: int
    data_bytes: int
    header_xxh3: int
    data_xxh3: int

    @property
    def request_id_bytes(self) -> bytes:
        """The request id's bytes as the snapshot stores them."""
        return self.request_id.encode("utf-8", "surrogateescape")


@python_call("ringkv.inspect_snapshot")
def inspect_snapshot(source: Any) -> SnapshotInfo:
    """Validates a snapshot file or image completely and describes it.
    ``source`` is a file path as a ``str`` or ``os.PathLike`` (a
    ``pathlib.Path``), or an image as a bytes-like object (``bytes``,
    ``bytearray``, ``memoryview``: what ``save_session_bytes`` returns).
    Bytes are always an image here, never a path (a bytes path:
    ``os.fsdecode(path)``); bytes-like holding no NUL byte, which no image
    can be (its first 8 bytes are the header length, little-endian), are
    refused with a RingKVValueError that says so; anything else (None, an
    int...) with a RingKVTypeError naming both accepted forms. ValueError
    (RKV_ERR_FORMAT) or OSError otherwise."""
    info = _SnapshotInfoStruct()
    if isinstance(source, (str, os.PathLike)):
        check(lib.rkv_snapshot_inspect(as_path(source, "source"), None, 0, ctypes.byref(info)))
    else:
        try:
            data = bytes(as_bytes(source, "source"))
        except RingKVTypeError:  # neither form: name both
            raise RingKVTypeError(f"source must be a file path (a str or os.PathLike) or a "
                                  f"snapshot image (a bytes-like object: bytes, bytearray, "
                                  f"memoryview); got {type(source).__name__}") from None
        if data and b"\0" not in data:
            shown = data if len(data) <= 64 else data[:64] + b"..."
            raise RingKVValueError(
                f"source is {type(source).__name__} of {len(data)} bytes with no NUL byte "
                f"({shown!r}): not a snapshot image (its first 8 bytes are the header length, "
                "little-endian); bytes are always an image here: to inspect a file, pass "
                "its path as a str or os.PathLike (os.fsdecode(path) for a bytes path)")
        check(lib.rkv_snapshot_inspect(None, data, len(data), ctypes.byref(info)))
    fields = {f: getattr(info, f) for f, _ in info._fields_[1:]}  # the ints as they are
    return SnapshotInfo(**{**fields, "ringkv_version": info.ringkv_version.decode(),
                           "request_id": info.request_id.decode("utf-8", "surrogateescape"),
                           "config": ModelConfig._from_struct(info.config),
                           "last_committed": None if info.last_committed < 0 else
                           info.last_committed})
