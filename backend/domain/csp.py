"""The Content-Security-Policy of every response, and script hashes for pages with inline scripts.

No script may be inline unless the policy names its SHA-256 hash: the dashboard has none (its
figures are JSON data blocks drawn by a served script), Swagger UI and the self-contained report
list the hashes of theirs. Styles stay ``'unsafe-inline'``: plotly.js writes ``style`` attributes
on every SVG element it draws and inserts a ``<style>`` element of its own at run time, and the
report's styles are inline by design (one file); an injected style cannot run code.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Iterable

# A <script> element that runs: no src, and not a JSON data block (browsers never execute those).
_INLINE_SCRIPT = re.compile(
    r"<script(?![^>]*\bsrc\s*=)(?![^>]*\btype\s*=\s*[\"']?application/json)[^>]*>(.*?)</script\s*>",
    re.IGNORECASE | re.DOTALL,
)


def script_hash(source: str) -> str:
    """The CSP source expression allowing exactly this inline script text."""
    digest = hashlib.sha256(source.encode("utf-8")).digest()
    return f"'sha256-{base64.b64encode(digest).decode('ascii')}'"


def inline_script_hashes(html: str) -> tuple[str, ...]:
    """The hash of every inline script of ``html``, in order, without repeats."""
    return tuple(dict.fromkeys(script_hash(s) for s in _INLINE_SCRIPT.findall(html)))


def content_security_policy(script_hashes: Iterable[str] = (), *, meta: bool = False) -> str:
    """Everything from this origin only; inline scripts only by hash; nothing may frame the page.

    ``meta``: the policy for a ``<meta http-equiv>`` element, which cannot carry ``frame-ancestors``
    (a browser ignores it there and complains in the console).
    """
    directives = [
        "default-src 'self'",
        " ".join(("script-src 'self'", *script_hashes)),
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data: blob:",
        "font-src 'self' data:",
        "connect-src 'self'",
        "worker-src 'self' blob:",  # ReDoc's search runs in a worker built from a blob
        "object-src 'none'",
        "base-uri 'self'",
        "form-action 'self'",
    ]
    if not meta:
        directives.append("frame-ancestors 'none'")
    return "; ".join(directives)
