"""Where a webhook may point: an ``http(s)`` URL whose host resolves only to public addresses.

A webhook makes the server send requests on an admin's behalf; pointed at ``127.0.0.1``, a private
network or a cloud's metadata service (``169.254.169.254``, ``fd00:ec2::254``, ``100.100.100.200``)
it would reach what the server can reach and the admin maybe cannot. So every address the host
resolves to is checked with :mod:`ipaddress`, when the webhook is created and again before each
delivery (a name may resolve elsewhere later), unless ``ABLATE_WEBHOOK_ALLOW_PRIVATE`` is set.
"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

from ablate.backend.errors import AblateError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Metadata services that are not already link-local or private ranges.
_METADATA = {ipaddress.ip_address("100.100.100.200")}  # Alibaba Cloud


class TargetRefused(AblateError):
    """The URL cannot be a webhook's target; the message says why."""


def refused_reason(address: IPAddress) -> str | None:
    """Why a resolved address may not be a target, or None for a public one."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address in _METADATA:
        return "a cloud metadata address"
    for kind, hit in (
        ("a loopback address", address.is_loopback),
        ("an unspecified address", address.is_unspecified),
        ("a link-local address (cloud metadata lives there)", address.is_link_local),
        ("a private address", address.is_private),
        ("a multicast address", address.is_multicast),
        ("a reserved address", address.is_reserved),
        ("not a public address", not address.is_global),  # shared (100.64/10), documentation, ...
    ):
        if hit:
            return kind
    return None


def split_target(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of a webhook URL, or :class:`TargetRefused` naming what is wrong."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise TargetRefused(f"webhook URL {url!r} must start with http:// or https://")
    try:
        host, port = parts.hostname, parts.port
    except ValueError as exc:
        raise TargetRefused(f"webhook URL {url!r}: {exc}") from None
    if not host:
        raise TargetRefused(f"webhook URL {url!r} has no host")
    if parts.username is not None or parts.password is not None:
        raise TargetRefused(f"webhook URL {url!r} must not hold credentials; the secret signs each request")
    return parts.scheme, host, port or (443 if parts.scheme == "https" else 80)


def check_target(url: str, *, allow_private: bool) -> None:
    """Refuse ``url`` unless every address its host resolves to is public (or ``allow_private``)."""
    _scheme, host, port = split_target(url)
    if allow_private:
        return
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise TargetRefused(f"webhook host {host!r} does not resolve: {exc}") from None
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
        reason = refused_reason(address)
        if reason is not None:
            raise TargetRefused(
                f"webhook host {host!r} resolves to {address}, {reason}; refused "
                "(set ABLATE_WEBHOOK_ALLOW_PRIVATE=true to allow private targets)"
            )
