"""``POST /results``: batches of results from CI (contract: docs/results-contract.md).

The body is read and parsed here rather than by FastAPI, with memory bounded: the bytes are kept once
(not also cached on the request) and dropped as soon as they are decoded. Whatever the way, the schema
sees what the json module would give, series as numpy arrays where every point is a plain number
(:func:`~ablate.backend.schemas.results.compact_series`). A body is parsed by simdjson, each series
copied into arrays in C (:func:`_parse_simd`): eight concurrent 9.8 MiB bodies peaked at 4.7x the
body a request against 4.1x the json module's way, and were stored in 2.3-2.7 s against 5.1-8.8 s
(``benchmarks/ingest_memory.py``). Where that way cannot vouch
for the result (an array nested in a series, a key twice, anything simdjson will not read), a body up
to :data:`FAST_BODY` (1 MiB) is parsed by orjson, twice as fast as the json module here, its series
lists then becoming arrays (it briefly holds about 16x the body in Python objects), and a larger one
by the json module with each step series becoming arrays as soon as it is parsed. A body orjson
refuses (NaN, Infinity) or may have misread (a float of 2**63 or more in its parse: orjson reads an
integer beyond 64 bits as one, the json module exactly, for the schema to refuse at its place) goes
that way too. The token check, parsing and storing run in one trip to the thread pool, so a large
batch never blocks the event loop.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np
import orjson
import simdjson
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


# What simdjson raises on what it will not read (bad UTF-8, a number beyond 64 bits, NaN, a lone
# surrogate, depth), on an array that is not all of one type, and what the walk below raises itself.
_NOT_SIMD = (TypeError, ValueError, RuntimeError, KeyError)
_Walk = Callable[[str, Any], tuple[Any, int]]


def _parse_simd(body: bytearray) -> dict[str, Any] | None:
    """The body as the json module and :func:`compact_series` would give it, or None where this way
    cannot vouch for that (the caller then parses another way). simdjson copies each series' numbers
    straight into an array (``as_buffer``), in C: no Python object a point, against orjson's two
    (about 3 ms of the 5 a request of ten 5,000-point results took). The rest of each result becomes
    plain Python values as every parser gives them.

    ``as_buffer`` flattens nested arrays (``[[1], [2]]`` would pass as steps 1, 2, where the schema
    must refuse), so the parse is kept only when every ``[`` of the body is accounted for: each array
    met, plus each ``[`` inside a decoded string, plus each ``\\u005b`` escape (which decodes to one
    without being one): equality leaves no room for an array hidden in a series. Duplicate keys in the
    objects walked here are refused (simdjson's look-up gives the first, the json module keeps the last).
    """
    try:
        doc = simdjson.Parser().parse(body)  # a parser each time: as fast, and it keeps no memory
        if not isinstance(doc, simdjson.Object):
            return None
        data, brackets = _simd_object(doc, _simd_top)
    except _NOT_SIMD:  # RecursionError included: a RuntimeError
        return None
    return data if _raw_brackets(body) == brackets else None


def _raw_brackets(body: bytearray) -> int:
    """Each ``[`` byte of the body, plus each ``\\u005b`` (either case): counted with numpy, as a
    scan of a megabyte by ``bytes.count`` takes 0.3 ms a pattern. An escaped backslash before
    ``u005b`` counts too: an over-count only ever sends the body the slower way."""
    raw = np.frombuffer(body, dtype=np.uint8)
    brackets = int(np.count_nonzero(raw == ord("[")))
    at = np.flatnonzero(raw[:-5] == ord("\\"))  # a backslash with five bytes after it
    if at.size:
        escape = (raw[at + 1] == ord("u")) & (raw[at + 2] == ord("0")) & (raw[at + 3] == ord("0"))
        escape &= (raw[at + 4] == ord("5")) & ((raw[at + 5] | 0x20) == ord("b"))  # b or B
        brackets += int(np.count_nonzero(escape))
    return brackets


def _simd_object(obj: simdjson.Object, inner: _Walk) -> tuple[dict[str, Any], int]:
    keys = list(obj)
    if len(set(keys)) != len(keys):
        raise KeyError("a key twice")
    out: dict[str, Any] = {}
    brackets = 0
    for key in keys:
        out[key], n = inner(key, obj[key])
        brackets += n + key.count("[")
    return out, brackets


def _simd_top(key: str, value: Any) -> tuple[Any, int]:
    if key != "results" or not isinstance(value, simdjson.Array):
        return _simd_plain(key, value)
    results, brackets = [], 1
    for one in value:
        if isinstance(one, simdjson.Object):
            item, n = _simd_object(one, _simd_result)
        else:
            item, n = _simd_plain("", one)
        results.append(item)
        brackets += n
    return results, brackets


def _simd_result(key: str, value: Any) -> tuple[Any, int]:
    if key == "series" and isinstance(value, simdjson.Object):
        return _simd_object(value, _simd_series)
    return _simd_plain(key, value)


def _simd_series(key: str, value: Any) -> tuple[Any, int]:
    """A ``{"steps": [...], "values": [...]}`` object as arrays, under :func:`compact_series`'s rules:
    ``as_buffer`` refuses a bool, a string, null, an object, a float among int64 steps and an integer
    beyond them; simdjson reads no non-finite number. Anything else stays as parsed."""
    if isinstance(value, simdjson.Object) and len(value) == 2:
        steps, values = value.get("steps"), value.get("values")
        if isinstance(steps, simdjson.Array) and isinstance(values, simdjson.Array):
            try:
                packed = {
                    "steps": np.frombuffer(steps.as_buffer(of_type="i"), dtype=np.int64),
                    "values": np.frombuffer(values.as_buffer(of_type="d"), dtype=np.float64),
                }
            except (TypeError, ValueError):
                pass
            else:
                return packed, 2
    return _simd_plain(key, value)


def _simd_plain(_key: str, value: Any) -> tuple[Any, int]:
    if isinstance(value, simdjson.Object):
        value = value.as_dict()
    elif isinstance(value, simdjson.Array):
        value = value.as_list()
    return value, _brackets(value)


def _brackets(value: Any) -> int:
    """Arrays in a parsed value, plus the ``[`` in its strings (keys included)."""
    kind = type(value)
    if kind is str:
        return int(value.count("["))
    if kind is list:
        return 1 + sum(_brackets(v) for v in value)
    if kind is dict:
        return sum(k.count("[") + _brackets(v) for k, v in value.items())
    return 0


def _parse(holder: list[bytearray]) -> ResultsBatch:
    """The batch from the body in ``holder`` (emptied: the bytes are freed once decoded)."""
    body = holder.pop()
    fast = _parse_simd(body)
    if fast is not None:
        del body
        return ResultsBatch.model_validate(fast)
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
