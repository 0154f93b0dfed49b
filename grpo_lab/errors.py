"""Errors the user must fix, raised before expensive work starts and printed by the entry points as
one line (no traceback) that names the key, file:line or path."""

from __future__ import annotations


class InputError(ValueError):
    """Input the user must fix (a config key, a data file, a busy run directory); the message is one
    line naming the key, file:line or path. Entry points print it without a traceback."""


class ConfigError(InputError):
    """A configuration value that cannot work; the message names the key."""


def require(ok: bool, key: str, value: object, allowed: str) -> None:
    """Raise ConfigError("key=value is invalid: allowed") unless `ok`."""
    if not ok:
        raise ConfigError(f"{key}={value!r} is invalid: {allowed}")
