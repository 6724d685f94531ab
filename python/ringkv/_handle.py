"""``HandleOwner``: the base of every class whose instances hold a C handle.

A C handle (an ``rkv_layer*``, ``rkv_model*``, ``rkv_threadpool*``, as an
int) is an address valid in one process for one owner: Python's generic
copy would give two objects one handle (a double free) and pickle would put
the address in a byte stream. This base closes that door for every class
that holds a handle, owned or borrowed:

- ``copy.copy``, ``copy.deepcopy`` and ``pickle`` raise
  :class:`ringkv.RingKVTypeError` (a ``TypeError``) that names the class
  and says what to do instead (:attr:`HandleOwner._copy_hint`), unless
  the subclass implements them;
- a subclass that can be copied derives from :class:`CopiedByValue`, and
  one that can be pickled overrides ``__reduce__`` (a state that holds
  values only: sizes, bytes, strings; never an address; copies still
  refuse without the first).

Every subclass outside this module (not the bases below) is
recorded in :data:`HANDLE_CLASSES`; the test suite walks
the package and fails for a class that holds a handle without deriving from
this base, and for a subclass it has no copy/pickle case for
(``python/tests/test_copy.py``).
"""
from __future__ import annotations

import weakref
from typing import Any

from .errors import RingKVTypeError, RingKVValueError

__all__ = ["HandleOwner", "CopiedByValue", "OwnedHandle", "HANDLE_CLASSES", "LIVE_MODELS", "copy_extras", "extras",
           "malformed_state", "check_state"]

HANDLE_CLASSES: list[type] = []

#: Live models by their rkv_model* (an int): the key the model ops take
#: (ringkv.ops.model_key), registered by ringkv.Model; a key no live model
#: holds is refused there. Here, below both, so neither imports the other.
LIVE_MODELS: "weakref.WeakValueDictionary[int, Any]" = weakref.WeakValueDictionary()


class HandleOwner:
    """Mixin base of a class holding a C handle; see the module docstring."""

    __slots__ = ()

    #: Why an instance cannot be copied or pickled, and what to do instead
    #: (appended to the TypeError's message). Subclasses override it.
    _copy_hint = "it holds a C handle (an address valid in this process only)"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__module__ != __name__:  # not the bases below
            HANDLE_CLASSES.append(cls)

    def _refuse(self, action: str) -> RingKVTypeError:
        name = f"{type(self).__module__}.{type(self).__qualname__}"
        return RingKVTypeError(f"cannot {action} a {name}: {self._copy_hint}")

    def __copy__(self) -> Any:
        raise self._refuse("copy")

    def __deepcopy__(self, memo: dict) -> Any:
        raise self._refuse("deepcopy")

    def __reduce__(self) -> Any:
        raise self._refuse("pickle")


class CopiedByValue(HandleOwner):
    """Base of a class whose copies are independent objects with equal
    contents (a LayerRingCache, a Model): ``copy.copy`` / ``copy.deepcopy``
    take the subclass's ``_copy()`` (its own handle and views, never a
    second name for this one's), then the attributes a caller added
    (:func:`copy_extras`; ``_OWN_ATTRS``: what the subclass sets itself)."""

    __slots__ = ()
    _OWN_ATTRS: frozenset = frozenset()

    def __copy__(self) -> Any:
        return self._clone(None)

    def __deepcopy__(self, memo: dict) -> Any:
        return self._clone(memo)

    def _clone(self, memo: dict | None) -> Any:
        new = self._copy()
        if memo is not None:
            memo[id(self)] = new
        copy_extras(self, new, self._OWN_ATTRS, memo)
        return new


class OwnedHandle(HandleOwner):
    """Base of the objects that hold a C handle ``ptr`` (an int) and free it
    with ``free(ptr)`` when they go (``free`` None: borrowed, never freed;
    held here, as module globals may be gone at exit); ``owner`` stays alive
    as long (what the handle needs: its model, context or stream)."""

    __slots__ = ("ptr", "owner", "_free")

    def __init__(self, ptr: int, owner: Any = None, free: Any = None):
        self.ptr, self.owner, self._free = ptr, owner, free

    def __del__(self):
        if self.ptr and self._free is not None:
            try:
                self._free(self.ptr)
            except Exception:  # noqa: BLE001 - interpreter shutdown
                pass
            self.ptr = None


def copy_extras(src: Any, dst: Any, own: frozenset[str] | set[str],
                memo: dict | None) -> None:
    """Copies the instance attributes a caller added to ``src`` (those in
    its ``__dict__`` not named in ``own``, the class's own state) onto
    ``dst``: shared for a shallow copy (``memo`` None), deep-copied
    otherwise, as copy.copy/copy.deepcopy would have done."""
    import copy
    for key, value in vars(src).items():
        if key not in own:
            setattr(dst, key, value if memo is None else copy.deepcopy(value, memo))


def extras(obj: Any, own: frozenset[str] | set[str]) -> dict | None:
    """The attributes a caller added to ``obj`` (see :func:`copy_extras`),
    for the state part of a ``__reduce__`` tuple; None when there are none."""
    added = {k: v for k, v in vars(obj).items() if k not in own}
    return added or None


def malformed_state(fmt: str, why: str) -> RingKVValueError:
    """The error for a pickled state of format ``fmt`` that cannot be read."""
    return RingKVValueError(f"malformed pickle of a {fmt}: {why}")


def check_state(state: Any, fmt: str, version: int) -> None:
    """RingKVValueError unless ``state`` is a dict of format ``fmt`` (e.g.
    "ringkv.Model") and version ``version``: a state from another class or
    from another version of ringkv is refused, never half-read."""
    if not isinstance(state, dict) or state.get("format") != fmt:
        raise malformed_state(fmt, f"not a {fmt.rpartition('.')[2]} state")
    if state.get("version") != version:
        raise malformed_state(fmt, f"format version {state.get('version')!r}; this ringkv reads "
                                   f"version {version}")
