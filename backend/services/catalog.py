"""The catalog: releases, variants, workloads and clusters, by name or defined in full.

Used by the catalog routes, by result ingest (entries "created on first sight") and by
``ablate release import``. A definition that differs from what is stored is refused naming the field,
because silently keeping either version would make two different setups look like one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel
from sqlalchemy import select
from sqlalchemy.orm import Session

from ablate.backend.db.models import Cluster, Release, Variant, Workload
from ablate.backend.domain.factors import normalize_factors
from ablate.backend.schemas.catalog import ClusterDef, ReleaseCreate, ReleaseUpdate, VariantDef, WorkloadDef
from ablate.backend.services.errors import Conflict, NotFound, ValidationProblem

Entry = TypeVar("Entry", Variant, Workload, Cluster)
NamedModel = type[Variant] | type[Workload] | type[Cluster]

_KIND: dict[type, str] = {Variant: "variant", Workload: "workload", Cluster: "cluster"}


def parse_release_ref(ref: str, loc: str = "release") -> tuple[str, str]:
    """``image:tag`` -> (image, tag). The tag is what follows the last colon (registries may have ports)."""
    image, sep, tag = ref.rpartition(":")
    if not sep or not image or not tag or "/" in tag:
        raise ValidationProblem.at(loc, f"expected IMAGE:TAG (e.g. training-nv-pytorch:25.12), got {ref!r}")
    return image, tag


# Releases ---------------------------------------------------------------------------------------


def find_release(session: Session, ref: str, loc: str = "release") -> Release | None:
    image, tag = parse_release_ref(ref, loc)
    return session.scalars(select(Release).where(Release.image == image, Release.tag == tag)).first()


def get_release(session: Session, ref: str, loc: str = "release") -> Release:
    release = find_release(session, ref, loc)
    if release is None:
        raise NotFound.at(loc, f"release {ref!r} does not exist; {_known_releases(session, ref)}")
    return release


def _known_releases(session: Session, ref: str, shown: int = 10) -> str:
    """What a mistyped reference could have meant: the image's tags, else the images there are."""
    image, _tag = parse_release_ref(ref)
    tags = list(
        session.scalars(
            select(Release.tag)
            .where(Release.image == image)
            .order_by(Release.created_at.desc())
            .limit(shown + 1)
        )
    )
    if tags:
        more = ", ..." if len(tags) > shown else ""
        return f"tags of {image}: {', '.join(tags[:shown])}{more}"
    images = list(session.scalars(select(Release.image).distinct().order_by(Release.image).limit(shown + 1)))
    if not images:
        return "no release is stored yet"
    more = ", ..." if len(images) > shown else ""
    return f"no release of image {image!r}; images: {', '.join(images[:shown])}{more}"


def list_releases(
    session: Session, *, image: str | None = None, platform: str | None = None
) -> list[Release]:
    query = select(Release).order_by(Release.image, Release.release_date.desc(), Release.tag.desc())
    if image:
        query = query.where(Release.image == image)
    if platform:
        query = query.where(Release.platform == platform)
    return list(session.scalars(query))


def _release_values(spec: ReleaseCreate) -> dict[str, Any]:
    return spec.model_dump(mode="python")


def create_release(session: Session, spec: ReleaseCreate) -> Release:
    ref = f"{spec.image}:{spec.tag}"
    if find_release(session, ref) is not None:
        raise Conflict.at("release", f"release {ref!r} already exists")
    release = Release(**_release_values(spec))
    session.add(release)
    session.flush()
    return release


@dataclass(frozen=True)
class ReleaseImport:
    """What importing a release file did: the release, whether it was new, and every change made."""

    release: Release
    created: bool
    changes: list[str]


def import_release(session: Session, spec: ReleaseCreate) -> ReleaseImport:
    """Create the release, or merge a file into the stored one (the platform must agree).

    Merging never drops recorded data: a manifest or driver entry the file does not name is kept
    (the file's value wins where both have one), notes the file adds are appended, and a release
    date is set or changed only when the file gives one. ``changes`` says what changed, one line each.
    """
    ref = f"{spec.image}:{spec.tag}"
    release = find_release(session, ref)
    if release is None:
        return ReleaseImport(create_release(session, spec), True, ["created"])
    if release.platform != spec.platform:
        raise Conflict.at("platform", f"release {ref!r} is stored with platform {release.platform!r}")
    changes: list[str] = []
    for section in ("manifest", "driver_requirements"):
        stored: dict[str, Any] = dict(getattr(release, section) or {})
        for name, version in getattr(spec, section).items():
            if name not in stored:
                changes.append(f"{section}.{name}: added {version}")
            elif stored[name] != version:
                changes.append(f"{section}.{name}: {stored[name]} -> {version}")
            stored[name] = version
        setattr(release, section, stored)
    notes: dict[str, Any] = dict(release.notes or {})
    for kind, items in spec.notes.model_dump(mode="json").items():
        have = list(notes.get(kind) or [])
        new = [item for item in items if item not in have]
        if new:
            changes.append(f"notes.{kind}: {len(new)} added")
            notes[kind] = have + new
    release.notes = notes
    if spec.release_date is not None and spec.release_date != release.release_date:
        changes.append(f"release_date: {release.release_date or 'unset'} -> {spec.release_date}")
        release.release_date = spec.release_date
    if spec.image_registry is not None and spec.image_registry != release.image_registry:
        changes.append(f"image_registry: {release.image_registry or 'unset'} -> {spec.image_registry}")
        release.image_registry = spec.image_registry
    session.flush()
    return ReleaseImport(release, False, changes)


def update_release(session: Session, release: Release, change: ReleaseUpdate) -> Release:
    for field, value in change.model_dump(mode="python", exclude_unset=True).items():
        if value is None and field != "release_date":
            continue
        setattr(release, field, value)
    session.flush()
    return release


def resolve_release(session: Session, value: str | ReleaseCreate, loc: str, *, may_create: bool) -> Release:
    """A result's release: by reference it must exist; in full it must agree, and only admins create it."""
    if isinstance(value, str):
        return get_release(session, value, loc)
    ref = f"{value.image}:{value.tag}"
    release = find_release(session, ref, loc)
    if release is None:
        if not may_create:
            raise NotFound.at(loc, f"release {ref!r} does not exist; only an admin token may define it")
        return create_release(session, value)
    # Notes are documentation, not setup: only what changes the measured software is compared.
    given = value.model_dump(mode="python", exclude_unset=True)
    _check_same(release, value, given, loc, exclude={"image", "tag", "notes"})
    return release


# Variants, workloads, clusters -------------------------------------------------------------------

_DEFS: dict[type, type[BaseModel]] = {Variant: VariantDef, Workload: WorkloadDef, Cluster: ClusterDef}


def _values(model: NamedModel, spec: BaseModel, *, unset: bool = True) -> dict[str, Any]:
    values = spec.model_dump(mode="python", exclude_unset=not unset)
    if model is Variant and "factors" in values:
        values["factors"] = normalize_factors(values["factors"])
    return values


def find_named(session: Session, model: type[Entry], name: str) -> Entry | None:
    return session.scalars(select(model).where(model.name == name)).first()


def get_named(session: Session, model: type[Entry], name: str, loc: str | None = None) -> Entry:
    entry = find_named(session, model, name)
    if entry is None:
        kind = _KIND[model]
        raise NotFound.at(loc or kind, f"{kind} {name!r} does not exist")
    return entry


def list_named(session: Session, model: type[Entry]) -> list[Entry]:
    order = (Variant.position, Variant.name) if model is Variant else (model.name,)
    return list(session.scalars(select(model).order_by(*order)))


def _name_of(spec: BaseModel) -> str:
    """The ``name`` of a variant, workload or cluster definition (each schema has one)."""
    name = getattr(spec, "name", None)
    if not isinstance(name, str):
        raise TypeError(f"{type(spec).__name__} has no name")
    return name


def create_named(session: Session, model: type[Entry], spec: BaseModel, loc: str | None = None) -> Entry:
    kind = _KIND[model]
    name = _name_of(spec)
    if find_named(session, model, name) is not None:
        raise Conflict.at(f"{loc}.name" if loc else "name", f"{kind} {name!r} already exists")
    entry = model(**_values(model, spec))
    session.add(entry)
    session.flush()
    return entry


def resolve_named(
    session: Session,
    model: type[Entry],
    value: str | BaseModel,
    loc: str,
    cache: dict[tuple[type, str], Any] | None = None,
) -> Entry:
    """By name: must exist. In full: created on first sight, refused (409 naming the field) if different."""
    name = value if isinstance(value, str) else _name_of(value)
    key = (model, name)
    entry = cache.get(key) if cache is not None else None
    if entry is None:
        entry = find_named(session, model, name)
    if entry is None:
        if isinstance(value, str):
            raise NotFound.at(loc, f"{_KIND[model]} {name!r} does not exist; define it in full once")
        entry = model(**_values(model, value))
        session.add(entry)
        session.flush()
    elif not isinstance(value, str):
        # Only fields the client gave are compared: a definition may omit what it does not care about.
        _check_same(entry, value, _values(model, value, unset=False), loc, exclude={"name"})
    if cache is not None:
        cache[key] = entry
    return entry


def _check_same(entry: Any, spec: BaseModel, given: dict[str, Any], loc: str, *, exclude: set[str]) -> None:
    for field, value in given.items():
        if field in exclude:
            continue
        stored = getattr(entry, field)
        if _normal(stored) != _normal(value):
            raise Conflict.at(
                f"{loc}.{field}",
                f"differs from the stored definition ({stored!r} stored, {value!r} given); "
                "use another name for a different setup",
            )


def _normal(value: Any) -> Any:
    # JSON round-trips turn tuples into lists and ints into floats; compare what the database holds.
    if isinstance(value, dict):
        return {str(k): _normal(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_normal(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value
