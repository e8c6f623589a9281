"""``POST /results``: batches of results from CI (contract: docs/results-contract.md).

The body is read and parsed here rather than by FastAPI, with memory bounded: the bytes are kept once
(not also cached on the request) and dropped as soon as they are decoded. A body up to
:data:`FAST_BODY` (1 MiB: ten results of 5,000 points) is parsed by orjson, twice as fast as the json
module here, its series lists then becoming numpy arrays; it briefly holds about 16x its size in
Python objects. A larger one is parsed by the json module with each step series becoming numpy
arrays as soon as it is parsed (:func:`~ablate.backend.schemas.results.compact_series`), so it peaks
at about 3x its body (``benchmarks/ingest_memory.py``). A body orjson refuses (NaN, Infinity)
or may have misread (a float of 2**63 or more in its parse: orjson reads an integer beyond 64 bits as
one, the json module exactly, for the schema to refuse at its place) goes the second way too. The
token check, parsing and storing run in one trip to the thread pool, so a large batch never blocks
the event loop.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import orjson
from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from ablate.backend.api import auth
from ablate.backend.api.deps import database
from ablate.backend.db.models import TokenScope
from ablate.backend.schemas.results import ResultsBatch, SubmitResponse, compact_series
from ablate.backend.services import ingest
from ablate.backend.services.errors import ProblemError, ValidationProblem

router = APIRouter(tags=["results"])

MAX_KEY = 200
# The token is checked in the transaction that stores the batch (auth.check_in), before the body is
# parsed: a request without a live token with the submit scope is refused before any parsing.
_bearer = auth.bearer(TokenScope.submit.value)


def _key(request: Request) -> str | None:
    key = request.headers.get("idempotency-key")
    if key is None:
        return None
    key = key.strip()
    if not key or len(key) > MAX_KEY or not key.isprintable():
        raise ValidationProblem.at("Idempotency-Key", f"must be 1 to {MAX_KEY} printable characters")
    return key


class MalformedJson(ProblemError):
    title = "Malformed JSON"
    slug = "malformed-json"


# Bodies up to this size are decoded whole by orjson: briefly about 16x the body in Python objects
# (at most 16 MiB a request), against 2.5x the body for the json module and its hook.
FAST_BODY = 1024 * 1024
# orjson reads an integer beyond 64 bits as a float, silently (above 2**64 - 1, and already below
# -2**63): such a float is at least this large. A body whose parse holds one goes the json module's way,
# which keeps such integers exact for the schema and ingest to refuse at their place.
_MISREAD = float(2**63)


def _misread(data: Any) -> bool:
    """Whether orjson's parse ``data`` (series already arrays) holds a float of magnitude 2**63 or more
    (or not finite): where orjson may have read an integer beyond 64 bits. A walk of the parsed values,
    not of the body: the series' arrays are checked whole, and the rest of a result is a few dozen values
    (a scan of the body for long digit runs took 1.5 ms for ten results)."""
    stack = [data]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is float:
            if not -_MISREAD < item < _MISREAD:
                return True
        elif kind is dict:
            stack.extend(item.values())
        elif kind is list:
            stack.extend(item)
        elif kind is np.ndarray and item.dtype.kind == "f" and item.size:
            stack.append(float(np.abs(item).max()))
    return False


def _compact_parsed(data: Any) -> None:
    """What :func:`compact_series` does during the json module's parse, after orjson's: each result's
    series objects become numpy arrays (or stay as parsed, for the schema to refuse)."""
    results = data.get("results") if isinstance(data, dict) else None
    for result in results if isinstance(results, list) else ():
        series = result.get("series") if isinstance(result, dict) else None
        if isinstance(series, dict):
            for name, one in series.items():
                if isinstance(one, dict):
                    series[name] = compact_series(one)


def _parse(holder: list[bytearray]) -> ResultsBatch:
    """The batch from the body in ``holder`` (emptied: the bytes are freed once decoded)."""
    body = holder.pop()
    if len(body) <= FAST_BODY:
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError:
            pass  # the json module below reads what orjson refuses, or names the problem
        else:
            _compact_parsed(data)
            if not _misread(data):
                del body
                return ResultsBatch.model_validate(data)
            del data
    try:
        text = body.decode("utf-8")
        del body
        # NaN and Infinity parse, for the schema to refuse at their exact place.
        data = json.loads(text, object_hook=compact_series)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise MalformedJson(f"request body is not valid JSON: {exc}"[:500]) from None
    del text
    return ResultsBatch.model_validate(data)


def _store(request: Request, holder: list[bytearray], secret: str) -> ingest.SubmitOutcome:
    """Check the token, parse and store in one trip to the thread pool (each trip waits for a thread on
    a busy host) and in one transaction (the token's look-up needs no connection of its own)."""

    try:
        key, bad_key = _key(request), None
    except ValidationProblem as exc:
        key, bad_key = None, exc

    def prelude(session: Session) -> tuple[ResultsBatch, str | None]:
        # In this order, as the answers always came: the token, then the body, then the key.
        principal = auth.check_in(session, secret, TokenScope.submit.value)
        batch = _parse(holder)
        if bad_key is not None:
            raise bad_key
        return batch, principal.scope

    return ingest.submit_results_retrying(
        database(request), None, token_scope=None, idempotency_key=key, prelude=prelude
    )


@router.post(
    "/results",
    status_code=201,
    response_model=SubmitResponse,
    responses={200: {"model": SubmitResponse, "description": "Already stored under this idempotency key"}},
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ResultsBatch"}}},
        },
        "parameters": [
            {
                "name": "Idempotency-Key",
                "in": "header",
                "required": False,
                "schema": {"type": "string", "maxLength": MAX_KEY},
                "description": "Same key again: the first submission's run ids, 200, nothing written.",
            }
        ],
    },
)
async def submit_results(request: Request, secret: str = Depends(_bearer)) -> Any:
    """Store a batch of results, all or nothing: 201 with the new run ids, 200 for a repeat."""
    body = bytearray()
    async for chunk in request.stream():  # not request.body(): that keeps a second copy on the request
        body += chunk
    holder = [body]
    del body
    outcome = await run_in_threadpool(_store, request, holder, secret)
    return JSONResponse(
        {"run_ids": outcome.run_ids, "created": outcome.created}, status_code=201 if outcome.created else 200
    )


def openapi_components() -> dict[str, Any]:
    """JSON schemas of the batch, for the OpenAPI document (the route reads the body itself)."""
    schema = ResultsBatch.model_json_schema(ref_template="#/components/schemas/{model}")
    defs = schema.pop("$defs", {})
    return {**defs, "ResultsBatch": schema}
