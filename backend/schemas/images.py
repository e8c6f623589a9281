"""The bodies of ``GET /api/v1/images``: what the images a release ran in really hold."""

from __future__ import annotations

from datetime import datetime

from ablate.backend.schemas.common import Out


class DeclaredCheckOut(Out):
    component: str
    declared: str
    found: str | None  # None: not found in the image
    state: str  # matches | differs | not found


class ImageSeenOut(Out):
    reference: str
    digest: str  # the registry digest when there is one, else the image id
    image_id: str | None
    runs: list[int]
    components: dict[str, str] | None  # None: not read yet
    declared_vs_found: list[DeclaredCheckOut]


class ReleaseImagesOut(Out):
    release: str
    images: list[ImageSeenOut]
    tag_moved: list[str]  # one line per reference whose runs saw more than one image


class ImageContentsOut(Out):
    digest: str
    reference: str
    components: dict[str, str]
    files: dict[str, str]  # component -> the file it was read from
    read_at: datetime
