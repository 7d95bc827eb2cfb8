"""Durations on the command line: ``90s``, ``15m``, ``1h``, ``1h30m`` (``--autostop``)."""

from __future__ import annotations

import re

from hpo.errors import ConfigError

_PART = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
_UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str, *, key: str = "--autostop") -> float:
    """Seconds in a duration such as ``90s``, ``15m``, ``1h`` or ``1h30m`` (a unit on every number).

    Args:
        text: The duration as the user wrote it.
        key: The option it came from, for the error message.

    Returns:
        The duration in seconds (> 0).

    Raises:
        ConfigError: For anything else (no unit, a negative or zero duration, an unknown unit), as one line.
    """
    value = text.strip().lower()
    parts = _PART.findall(value)
    if not value or "".join(n + u for n, u in parts) != value:
        raise ConfigError(
            f"{key}: {text!r} is not a duration; write a number with a unit, e.g. 90s, 15m, 1h or 1h30m"
        )
    seconds = sum(float(n) * _UNIT_S[u] for n, u in parts)
    if seconds <= 0:
        raise ConfigError(f"{key}: {text!r} is no time at all; give a positive duration, e.g. 15m")
    return seconds


def format_duration(seconds: float) -> str:
    """``seconds`` as ``parse_duration`` reads it back (``900`` → ``15m``, ``5400`` → ``1h30m``, ``2.5`` → ``2.5s``)."""
    if seconds != int(seconds):
        return f"{seconds:g}s"
    rest, out = int(seconds), ""
    for unit, size in (("h", 3600), ("m", 60), ("s", 1)):
        if rest >= size:
            out += f"{rest // size}{unit}"
            rest %= size
    return out or "0s"
