"""ringkv on Ray (docs/migration.md, "On Ray" and "Faults"): sessions that
move between processes and hosts.

- :class:`SessionHost`: ``ray.remote`` (``num_cpus=0``) of
  :class:`ringkv.ray.host.SessionHost`: one :class:`ringkv.Model` and the
  sessions it steps; one per device, or one per process on the CPU.
- :class:`SessionRouter`: a handle on the one placement of its name
  (:mod:`ringkv.ray.router`): placement, migration, page-out and in, and
  recovery of the sessions of a host that died.
- :func:`init_loopback` (a local Ray cluster bound to 127.0.0.1 only) and
  :func:`make_hosts`; :mod:`ringkv.ray.stream` (the deterministic token
  streams and digests) and :mod:`ringkv.ray.checkpoint` (checkpoints that say whose they are).

Install with ``pip install ringkv[ray]`` (Ray and xxhash). ``import
ringkv.ray`` itself does not import Ray: the names above do, on first use.
"""
from __future__ import annotations

import os
from typing import Any

_ROUTER_NAMES = ("SessionRouter", "RouterCore", "MigrationError", "HostError",
                 "RouterRestartedError", "Recovery", "StepReport", "Migration")
__all__ = ["SessionHost", *_ROUTER_NAMES, "init_loopback", "make_hosts"]


def __getattr__(name: str) -> Any:
    if name == "SessionHost":               # made once: a module global from then on
        import ray
        from .host import SessionHost as _Plain
        globals()[name] = ray.remote(num_cpus=0, max_restarts=0)(_Plain)
        return globals()[name]
    if name in _ROUTER_NAMES:
        from . import router
        return getattr(router, name)
    raise AttributeError(f"module 'ringkv.ray' has no attribute {name!r}")


def init_loopback(num_cpus: int = 2, object_store_memory: int | None = None,
                  worker_niceness: int = 0, **kwargs: Any) -> Any:
    """Starts a local Ray cluster that binds to 127.0.0.1 only and sends
    nothing elsewhere (docs/migration.md, "On Ray": why
    RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 is needed), with no dashboard and
    no usage statistics. Its workers inherit this process's environment,
    plus the folder holding ``ringkv`` (PYTHONPATH) and the loaded library
    (RINGKV_LIBRARY). ``worker_niceness``: the nice value of Ray's workers,
    actors included (Ray's default, 15, starves them on a busy machine:
    the Ray tests ran 5-8x slower with both cores busy). Returns
    ``ray.init``'s context; end with ``ray.shutdown()``. RuntimeError
    (after shutting Ray down) if the node is not on 127.0.0.1."""
    import ringkv
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    here = os.path.dirname(os.path.dirname(os.path.abspath(ringkv.__file__)))
    path = os.environ.get("PYTHONPATH", "")
    if here not in path.split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (here, path) if p)
    if os.path.isabs(ringkv.library_path):
        os.environ["RINGKV_LIBRARY"] = ringkv.library_path
    import ray
    from ray._private import ray_constants
    ray_constants.ENABLE_RAY_CLUSTER = False  # when ray was imported before the variable
    system = {"worker_niceness": worker_niceness, **kwargs.pop("_system_config", {})}
    ctx = ray.init(num_cpus=num_cpus, _node_ip_address="127.0.0.1", include_dashboard=False,
                   object_store_memory=object_store_memory, log_to_driver=False,
                   _system_config=system, **kwargs)
    addresses = {n["NodeManagerAddress"] for n in ray.nodes()}
    if addresses != {"127.0.0.1"}:
        ray.shutdown()
        raise RuntimeError(f"ringkv.ray.init_loopback: the Ray node is at {sorted(addresses)}, "
                           "not 127.0.0.1")
    return ctx


def make_hosts(names: list[str], config: Any, checkpoint_dir: str | None = None,
               checkpoint_every: int = 0, max_restarts: int = 0) -> dict[str, Any]:
    """One :class:`SessionHost` actor per name, each with a model of
    ``config`` (a ringkv.ModelConfig or its fields as a dict), ready
    (created and answering) when this returns. ``max_restarts``: how often
    Ray restarts a host that dies (-1: always); a restarted host is empty,
    under a new incarnation token, and the router treats the restart as a
    death of the host it knew."""
    import ray
    from . import SessionHost
    host_cls = SessionHost.options(max_restarts=max_restarts)
    hosts = {n: host_cls.remote(n, config, checkpoint_dir, checkpoint_every) for n in names}
    ray.get([h.ping.remote() for h in hosts.values()])
    return hosts
