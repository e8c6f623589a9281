"""Path parameters with a pattern of their own, registered with Starlette before any route uses them."""

from __future__ import annotations

from starlette.convertors import Convertor, register_url_convertor

# The sub-resources of a release, served by routes of their own for GET only.
RELEASE_SUBRESOURCES = ("comparison", "report")


class ReleaseRefConvertor(Convertor[str]):
    """``{ref:release_ref}``: a release reference, any text as ``{ref:path}`` (image names hold
    slashes) except a path ending in a release's sub-resource. With ``{ref:path}`` the catalog's
    ``PATCH`` and ``DELETE /releases/{ref}`` took ``/releases/X/comparison`` as release ``X/comparison``
    (422 or 404 instead of 405), and a 405 there advertised their methods in ``Allow``."""

    regex = r"(?!.*/(?:" + "|".join(RELEASE_SUBRESOURCES) + r")$).*"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("release_ref", ReleaseRefConvertor())

# One release by reference (catalog reads and updates, hygiene's delete).
RELEASE_PATH = "/releases/{ref:release_ref}"
