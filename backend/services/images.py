"""The images a release's runs really ran in: which digests each reference resolved to (a tag that moved
during a release shows two), and what each image holds (read from its files by the node that pulled it,
stored once per digest) beside what the release declares."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ablate.backend.analysis.manifest import check_declared
from ablate.backend.db.base import utcnow
from ablate.backend.db.models import ImageManifest, Release, Run, RunStatus
from ablate.backend.services import catalog
from ablate.backend.services.errors import NotFound


def store_contents(session: Session, found: Iterable[Mapping[str, Any]]) -> int:
    """Store what images hold (``digest``, ``reference``, ``components``, ``files`` each), once per
    digest: a digest's contents never change. Returns how many were new."""
    wanted = {str(f["digest"]): f for f in found if f.get("digest")}
    if not wanted:
        return 0
    have = set(session.scalars(select(ImageManifest.digest).where(ImageManifest.digest.in_(list(wanted)))))
    new = [f for d, f in wanted.items() if d not in have]
    for f in new:
        session.add(
            ImageManifest(
                digest=str(f["digest"])[:300],
                reference=str(f.get("reference") or "")[:700],
                components={str(k)[:200]: str(v)[:200] for k, v in dict(f.get("components") or {}).items()},
                files={str(k)[:200]: str(v)[:1000] for k, v in dict(f.get("files") or {}).items()},
                read_at=utcnow(),
            )
        )
    session.flush()
    return len(new)


def get_contents(session: Session, digest: str) -> ImageManifest:
    found = session.get(ImageManifest, digest)
    if found is None:
        raise NotFound.at("digest", f"no image with digest {digest!r} has been read")
    return found


@dataclass
class ImageSeen:
    """One digest a reference resolved to in a release's runs."""

    reference: str
    digest: str  # the registry digest when there is one, else the image id
    image_id: str | None
    runs: list[int] = field(default_factory=list)
    components: dict[str, str] | None = None  # None: not read (yet)
    checks: list[dict[str, str | None]] = field(default_factory=list)  # declared vs found

    def to_dict(self) -> dict[str, Any]:
        return {
            "reference": self.reference,
            "digest": self.digest,
            "image_id": self.image_id,
            "runs": self.runs,
            "components": self.components,
            "declared_vs_found": self.checks,
        }


def digest_of(provenance: Mapping[str, Any]) -> str | None:
    """The identity of the image a run ran in: its registry digest, else its image id."""
    value = provenance.get("image_digest") or provenance.get("image_id")
    return str(value) if value else None


def images_seen(rows: Iterable[tuple[int, Mapping[str, Any]]]) -> dict[str, dict[str, ImageSeen]]:
    """reference -> digest -> what ran in it, from (run id, provenance) of succeeded runs."""
    out: dict[str, dict[str, ImageSeen]] = defaultdict(dict)
    for run_id, prov in rows:
        digest, ref = digest_of(prov or {}), (prov or {}).get("image")
        if not digest or not ref:
            continue
        seen = out[str(ref)].setdefault(digest, ImageSeen(str(ref), digest, prov.get("image_id")))
        seen.runs.append(run_id)
    return out


def moved_tags(seen: Mapping[str, Mapping[str, ImageSeen]]) -> list[str]:
    """One line per reference whose runs saw more than one image: the tag moved during the release."""
    lines = []
    for ref, by_digest in sorted(seen.items()):
        if len(by_digest) > 1:
            parts = ", ".join(f"{d} ({len(s.runs)} runs)" for d, s in sorted(by_digest.items()))
            lines.append(
                f"image {ref}: the tag moved during this release: runs saw {len(by_digest)} images: {parts}"
            )
    return lines


def release_images(session: Session, ref: str) -> dict[str, Any]:
    """The images a release's succeeded runs ran in, each with what it holds beside the declared manifest."""
    release = catalog.get_release(session, ref)
    rows = session.execute(
        select(Run.id, Run.provenance).where(
            Run.release_id == release.id, Run.status == RunStatus.succeeded.value
        )
    ).all()
    seen = images_seen((rid, prov or {}) for rid, prov in rows)
    digests = [d for by in seen.values() for d in by]
    stored = {
        m.digest: m for m in session.scalars(select(ImageManifest).where(ImageManifest.digest.in_(digests)))
    }
    declared = {str(k): str(v) for k, v in (release.manifest or {}).items()}
    for by in seen.values():
        for item in by.values():
            got = stored.get(item.digest) or (stored.get(item.image_id) if item.image_id else None)
            if got is not None:
                item.components = dict(got.components or {})
                item.checks = [vars(c) for c in check_declared(declared, item.components)]
    return {
        "release": release.ref,
        "images": [i.to_dict() for _, by in sorted(seen.items()) for _, i in sorted(by.items())],
        "tag_moved": moved_tags(seen),
    }


def found_components(session: Session, release: Release) -> dict[str, str] | None:
    """What the release's images hold, merged (None when none was read): the manifest diff's source
    when present, so the suspects of a regression come from the images, not only from the notes."""
    rows = session.execute(
        select(Run.provenance).where(Run.release_id == release.id, Run.status == RunStatus.succeeded.value)
    ).scalars()
    return components_of(session, {d for d in (digest_of(p or {}) for p in rows) if d})


def components_of(session: Session, digests: set[str]) -> dict[str, str] | None:
    """The components of these images, merged (None when none of them was read)."""
    if not digests:
        return None
    merged: dict[str, str] = {}
    for m in session.scalars(select(ImageManifest).where(ImageManifest.digest.in_(sorted(digests)))):
        for name, version in (m.components or {}).items():
            merged.setdefault(name, version)
    return merged or None
