"""Joining a Ray cluster that has token authentication (Ray 2.60).

A Ray 2.60 head started with ``~/.ray/auth_token`` (or ``RAY_AUTH_MODE=token``) refuses every process
without its token: ``ray.init(address=...)`` only logs ``InvalidAuthToken`` and, after retrying for
about 20 s, raises a ``ConnectionError`` that does not say why. Ray takes its token only from its own
environment (``RAY_AUTH_MODE=token`` with ``RAY_AUTH_TOKEN`` or ``RAY_AUTH_TOKEN_PATH``) or from
``~/.ray/auth_token``; it never reads an address-specific setting. So the dispatcher hands the token of
``ABLATE_RAY_AUTH_TOKEN`` / ``ABLATE_RAY_AUTH_TOKEN_FILE`` to Ray through those variables before it
connects, and asks the head once, directly, before ``ray.init``, so that a missing or wrong token is one
clear line at once instead of a vague error 20 s later.
"""

from __future__ import annotations

import importlib
import logging
import os
import secrets
import socket
from typing import Any

from ablate.backend.config import Settings
from ablate.backend.errors import ConfigError

log = logging.getLogger(__name__)
CONNECT_S = 5.0

HINT = (
    "set ABLATE_RAY_AUTH_TOKEN (or ABLATE_RAY_AUTH_TOKEN_FILE) to the head's token "
    "(`ray get-auth-token` on the head prints it; the head keeps it in ~/.ray/auth_token)"
)


def configured_token(settings: Settings) -> str | None:
    """The token the settings give, or None; a token file that cannot be read, or is empty, or a token
    given twice, is a ConfigError naming the setting."""
    inline = settings.ray_auth_token.get_secret_value().strip()
    path = settings.ray_auth_token_file
    if inline and path is not None:
        raise ConfigError(
            "give the Ray token once: ABLATE_RAY_AUTH_TOKEN or ABLATE_RAY_AUTH_TOKEN_FILE, not both"
        )
    if path is None:
        return inline or None
    try:
        token = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ConfigError(f"ABLATE_RAY_AUTH_TOKEN_FILE {path}: cannot read it ({exc.strerror})") from None
    if not token:
        raise ConfigError(f"ABLATE_RAY_AUTH_TOKEN_FILE {path} is empty (it must hold the head's Ray token)")
    return token


def apply(settings: Settings) -> str | None:
    """Give Ray this process's token, if the settings hold one; returns the setting it came from (for
    errors), or None. Must run before ``ray.init``."""
    token = configured_token(settings)
    if token is None:
        return None
    # Ray reads these from the environment only; this process and anything it starts see them.
    os.environ["RAY_AUTH_MODE"] = "token"
    os.environ["RAY_AUTH_TOKEN"] = token
    os.environ.pop("RAY_AUTH_TOKEN_PATH", None)
    _refresh_ray_config()
    return (
        "ABLATE_RAY_AUTH_TOKEN_FILE" if settings.ray_auth_token_file is not None else "ABLATE_RAY_AUTH_TOKEN"
    )


def own_local_token() -> None:
    """A local Ray of our own keeps Ray 2.60's token authentication, with a fresh token handed over in
    the environment: left to itself Ray writes ``~/.ray/auth_token`` into the user's home and warns
    about it at every start. An operator's own ``RAY_AUTH_MODE`` is left as it is."""
    if "RAY_AUTH_MODE" in os.environ:
        return
    os.environ["RAY_AUTH_MODE"] = "token"
    os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
    os.environ.pop("RAY_AUTH_TOKEN_PATH", None)
    _refresh_ray_config()


def _refresh_ray_config() -> None:
    """Ray caches its config and token when ``ray`` is first imported (by this process, or a test that
    ran before): reload both, as Ray's own ``ray start`` does when it turns token mode on."""
    # Private to Ray (its stub does not declare them): looked up, so a Ray that moved them only loses this.
    raylet: Any = importlib.import_module("ray._raylet")
    config, loader = getattr(raylet, "Config", None), getattr(raylet, "AuthenticationTokenLoader", None)
    if config is None or loader is None:  # a Ray without token authentication: nothing cached
        return
    config.initialize("")
    loader.instance().reset_cache()


def check_access(address: str, token_from: str | None) -> None:
    """Ask the head at ``address`` (``host:port``) once, before ``ray.init``: a refused token becomes a
    ConfigError that says which setting to fix (``token_from``: the setting the token came from, None
    when no token was given). Anything else (an unreachable head, a Ray whose internals moved) is left to
    ``ray.init`` and its own error."""
    if address in ("", "auto", "local") or address.startswith("ray://"):
        return  # auto and local find their token themselves; Ray Client has no GCS to ask
    host, _, port = address.rpartition(":")
    try:
        # Ray's own client waits 40 s for a head that does not answer; a plain connect says at once.
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_S).close()
    except (OSError, ValueError):
        return
    raylet: Any = importlib.import_module("ray._raylet")
    exceptions: Any = importlib.import_module("ray.exceptions")
    gcs_client = getattr(raylet, "GcsClient", None)
    refused = getattr(exceptions, "AuthenticationError", None)
    if gcs_client is None or refused is None:
        return
    try:
        gcs_client(address=address)
    except refused as exc:
        if token_from is not None:
            raise ConfigError(
                f"the Ray cluster at {address} refused the token of {token_from} ({_first_line(exc)}): "
                f"it is not the head's token; {HINT}"
            ) from None
        raise ConfigError(
            f"the Ray cluster at {address} requires token authentication ({_first_line(exc)}); {HINT}"
        ) from None
    except Exception as exc:  # an API that changed, a head that went away: ray.init says what it says
        log.debug("Ray access check of %s skipped: %s", address, exc)


def join_failed(address: str, exc: ConnectionError, token_from: str | None) -> ConfigError:
    """What to say when ``ray.init`` could not join ``address`` (e.g. ``auto``, which is not asked
    beforehand): Ray's own words, and where no token was given, that a head with token authentication
    needs one (Ray logs ``InvalidAuthToken`` above it then)."""
    text = f"cannot join the Ray cluster at {address}: {exc}"
    if token_from is None:
        text += f". If Ray logged InvalidAuthToken, its head has token authentication: {HINT}"
    return ConfigError(text)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.split(". ", 1)[0] if text else type(exc).__name__
