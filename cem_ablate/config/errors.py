"""The one error type a user sees for bad input."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class ConfigError(ValueError):
    """A configuration is invalid. The message is one sentence naming the key path.

    Raised before any module is built or any training starts; the CLI prints the
    message on one line and exits non-zero instead of showing a traceback.
    """

    def __init__(self, path: str, message: str):
        self.path = path
        self.message = message
        super().__init__(f"{path}: {message}" if path else message)


def closest(name: str, allowed: Iterable[str]) -> str:
    """A 'did you mean' fragment listing the closest allowed names (or '')."""
    matches = difflib.get_close_matches(str(name), [str(a) for a in allowed], n=3, cutoff=0.5)
    return f" Did you mean {' or '.join(repr(m) for m in matches)}?" if matches else ""


def unknown(path: str, name: str, allowed: Iterable[str], what: str = "key") -> ConfigError:
    allowed = sorted(str(a) for a in allowed)
    return ConfigError(
        path,
        f"unknown {what} {name!r}.{closest(name, allowed)} Allowed: {', '.join(allowed)}.",
    )
