"""Catalog routes: releases, variants, workloads, clusters. Writes need admin; reads are open by default."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Depends, Query, Request

from ablate.backend.api import auth
from ablate.backend.api.deps import database
from ablate.backend.api.paths import RELEASE_PATH
from ablate.backend.db.models import Cluster, Variant, Workload
from ablate.backend.schemas.catalog import (
    ClusterDef,
    ClusterOut,
    ReleaseCreate,
    ReleaseOut,
    ReleaseUpdate,
    VariantDef,
    VariantOut,
    WorkloadDef,
    WorkloadOut,
)
from ablate.backend.services import catalog

router = APIRouter(tags=["catalog"])


@router.post("/releases", status_code=201, response_model=ReleaseOut, dependencies=[Depends(auth.admin)])
def create_release(body: ReleaseCreate, request: Request) -> Any:
    with database(request).transaction() as session:
        return ReleaseOut.model_validate(catalog.create_release(session, body))


@router.get("/releases", response_model=list[ReleaseOut], dependencies=[Depends(auth.read)])
def list_releases(
    request: Request,
    image: str | None = Query(None, max_length=200, description="Image family, e.g. training-nv-pytorch."),
    platform: Literal["gpu", "ppu", "cpu"] | None = None,
) -> Any:
    with database(request).read() as session:
        return [
            ReleaseOut.model_validate(r)
            for r in catalog.list_releases(session, image=image, platform=platform)
        ]


@router.get(RELEASE_PATH, response_model=ReleaseOut, dependencies=[Depends(auth.read)])
def get_release(ref: str, request: Request) -> Any:
    """A release by ``image:tag``, e.g. ``training-nv-pytorch:25.12``."""
    with database(request).read() as session:
        return ReleaseOut.model_validate(catalog.get_release(session, ref, "ref"))


@router.patch(RELEASE_PATH, response_model=ReleaseOut, dependencies=[Depends(auth.admin)])
def update_release(ref: str, body: ReleaseUpdate, request: Request) -> Any:
    """Change notes, manifest, driver requirements or release date (what a release *is* stays)."""
    with database(request).transaction() as session:
        release = catalog.get_release(session, ref, "ref")
        return ReleaseOut.model_validate(catalog.update_release(session, release, body))


def _named_routes(model: Any, definition: Any, out: Any, plural: str) -> None:
    kind = plural[:-1]

    def create(body: Any, request: Request) -> Any:
        with database(request).transaction() as session:
            return out.model_validate(catalog.create_named(session, model, body))

    # Annotations are strings under `from __future__ import annotations`; FastAPI needs the real class.
    create.__annotations__ = {"body": definition, "request": Request, "return": Any}

    def list_all(request: Request) -> Any:
        with database(request).read() as session:
            return [out.model_validate(e) for e in catalog.list_named(session, model)]

    def get_one(name: str, request: Request) -> Any:
        with database(request).read() as session:
            return out.model_validate(catalog.get_named(session, model, name, "name"))

    create.__doc__ = f"Create a {kind}; 409 if the name is taken."
    list_all.__doc__ = f"Every {kind}."
    get_one.__doc__ = f"One {kind} by name (names may contain '/')."
    routes = (  # path, endpoint, method, status, response model, scope, route name
        (f"/{plural}", create, "POST", 201, out, auth.admin, f"create_{kind}"),
        (f"/{plural}", list_all, "GET", None, list[out], auth.read, f"list_{plural}"),
        (f"/{plural}/{{name:path}}", get_one, "GET", None, out, auth.read, f"get_{kind}"),
    )
    for path, endpoint, method, status, response, scope, name in routes:
        router.add_api_route(
            path,
            endpoint,
            methods=[method],
            status_code=status,
            response_model=response,
            dependencies=[Depends(scope)],
            name=name,
        )


_named_routes(Variant, VariantDef, VariantOut, "variants")
_named_routes(Workload, WorkloadDef, WorkloadOut, "workloads")
_named_routes(Cluster, ClusterDef, ClusterOut, "clusters")
