"""Which clusters a dispatcher serves: a cluster's ``ray_address`` is compared with the Ray cluster the
dispatcher is connected to by what it names, not by its spelling.

``auto``, ``host:port`` (the head's GCS) and ``ray://host:port`` (Ray Client, another port on the same
head) all name one Ray cluster. The dispatcher knows the GCS address it is connected to; an address
names that cluster when its host resolves to the GCS host (any address of this machine counts as this
machine) and its port is the GCS port, or any port for ``ray://`` (the client server listens on its own
port). ``auto`` names the cluster on the dispatcher's machine, which is the one a dispatcher started
with ``auto`` or a local Ray is connected to. An empty address means the default cluster: every
dispatcher serves it.
"""

from __future__ import annotations

import functools
import socket
from collections.abc import Iterable
from urllib.parse import urlsplit

import psutil

AUTO = "auto"


def split_address(address: str) -> tuple[str, str, int | None]:
    """``(scheme, host, port)`` of ``host:port``, ``ray://host:port`` or ``gcs://host:port``."""
    text = address.strip()
    parts = urlsplit(text if "://" in text else f"gcs://{text}")
    return parts.scheme, (parts.hostname or "").lower(), parts.port


@functools.lru_cache(maxsize=256)
def _resolve(host: str) -> frozenset[str]:
    try:
        return frozenset(str(info[4][0]) for info in socket.getaddrinfo(host, None))
    except OSError:  # an unknown name names no cluster we are connected to
        return frozenset({host})


@functools.lru_cache(maxsize=1)
def _own_addresses() -> frozenset[str]:
    own = {"127.0.0.1", "::1", "localhost", socket.gethostname()}
    for addrs in psutil.net_if_addrs().values():
        own.update(a.address.split("%")[0] for a in addrs if a.family in (socket.AF_INET, socket.AF_INET6))
    return frozenset(own)


def _same_host(a: str, b: str) -> bool:
    ra, rb = _resolve(a), _resolve(b)
    if ra & rb:
        return True
    own = _own_addresses()
    return bool(ra & own) and bool(rb & own)


def names_cluster(address: str | None, gcs_address: str, *, joined: str = "") -> bool:
    """Whether a cluster bound to ``address`` is the Ray cluster at ``gcs_address`` (the one a dispatcher
    is connected to; ``joined`` is what it was told to join: ``ABLATE_RAY_ADDRESS``)."""
    if not address or not address.strip():
        return True  # the default cluster
    if address.strip().lower() == AUTO:
        # the cluster on the dispatcher's machine: the one it joined with "auto", or started itself
        return joined.strip().lower() in ("", AUTO) or _same_host(split_address(gcs_address)[1], "127.0.0.1")
    if not gcs_address:
        return False
    scheme, host, port = split_address(address)
    _, gcs_host, gcs_port = split_address(gcs_address)
    if not _same_host(host, gcs_host):
        return False
    return scheme == "ray" or port is None or port == gcs_port


def served_ids(
    clusters: Iterable[tuple[int, str | None]], gcs_address: str, *, joined: str = ""
) -> list[int]:
    """The ids of the clusters (``(id, ray_address)``) the dispatcher at ``gcs_address`` serves."""
    return [cid for cid, address in clusters if names_cluster(address, gcs_address, joined=joined)]
