"""``GET /api/v1/images``: the images a release's runs ran in and what they hold. Thin: see
:mod:`ablate.backend.services.images`."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request

from ablate.backend.api import auth
from ablate.backend.api.deps import database
from ablate.backend.schemas.images import ImageContentsOut, ReleaseImagesOut
from ablate.backend.services import images as svc

router = APIRouter(tags=["images"], dependencies=[Depends(auth.read)])


@router.get("/images", response_model=ReleaseImagesOut, summary="The images a release ran in")
def release_images(
    request: Request,
    release: Annotated[str, Query(min_length=3, max_length=265, description="image:tag of the release")],
) -> Any:
    """Each image (by digest) the release's succeeded runs ran in, with the runs, what the image holds
    (read from its files by the node that pulled it) beside the release's declared manifest, and a
    line per reference whose tag moved while the release ran."""
    with database(request).read() as session:
        return svc.release_images(session, release)


@router.get("/images/{digest:path}", response_model=ImageContentsOut, summary="What one image holds")
def image_contents(
    request: Request,
    digest: Annotated[str, Path(min_length=8, max_length=300, pattern=r"^[A-Za-z0-9@:._/\-]+$")],
) -> Any:
    """Components and versions read from the image's files, and the file each came from."""
    with database(request).read() as session:
        return svc.get_contents(session, digest)
