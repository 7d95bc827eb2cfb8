"""Starting a quiet local Ray, or connecting to a running cluster with its token."""

from __future__ import annotations

import os
from typing import Any

import hpo._env as _env


def start_ray(address: str | None = None, num_cpus: int | None = None) -> bool:
    """Starts (or connects to) Ray quietly; returns True if this call started it.

    hpo's process environment (:data:`hpo._env.WORKER_ENV`) reaches every Ray worker through the
    ``runtime_env``, with the working directory on ``PYTHONPATH`` so user model modules import there.

    Args:
        address: A running cluster (``auto``, ``host:6379``, ``ray://…``); None starts a local Ray
            (``address="local"``, so hpo never attaches to a foreign cluster by accident).
        num_cpus: CPUs of the local Ray (None: all).
    """
    import ray

    if ray.is_initialized():
        return False
    env = _env.worker_env()
    path = os.pathsep.join(p for p in [os.getcwd(), os.environ.get("PYTHONPATH", "")] if p)
    kwargs: dict[str, Any] = {
        "include_dashboard": False,
        "log_to_driver": bool(os.environ.get("HPO_DEBUG")),
        "logging_level": "ERROR",
        "runtime_env": {"env_vars": {**env, "PYTHONPATH": path}},
    }
    if address:
        _use_token_auth_if_available(address)
        ray.init(address=address, **kwargs)
    else:
        ray.init(address="local", num_cpus=num_cpus, **kwargs)
    return True


def stop_ray(started: bool) -> None:
    """Shuts Ray down if this process started it (a cluster hpo connected to keeps running)."""
    if started:
        import ray

        ray.shutdown()


def _use_token_auth_if_available(address: str) -> None:
    """Turns Ray token auth on for this process when connecting to a running cluster with a token at hand.

    ``ray.init`` enables token auth by itself only for a cluster it finds on its own; an explicit
    address, ``RAY_ADDRESS`` included (which ``ray job submit`` sets), is tried without a token unless
    ``RAY_AUTH_MODE=token`` is set, and a cluster started by ``ray start`` rejects that. An explicit
    ``RAY_AUTH_MODE`` is left alone; Ray Client (``ray://``) addresses authenticate differently.
    """
    if address.startswith("ray://") or "RAY_AUTH_MODE" in os.environ:
        return
    from hpo import compat

    compat.enable_ray_token_auth_if_available()
