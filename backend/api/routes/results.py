"""``POST /results``: batches of results from CI (contract: docs/results-contract.md).

The body is read and parsed here (``model_validate_json``, pydantic's own JSON parser) rather than by
FastAPI: it is several times faster on series of thousands of points and reads the bytes exactly once.
Parsing and storing run in the thread pool so a large batch never blocks the event loop.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from ablate.backend.api import auth
from ablate.backend.api.deps import database
from ablate.backend.schemas.results import ResultsBatch, SubmitResponse
from ablate.backend.services import ingest
from ablate.backend.services.errors import ValidationProblem
from ablate.backend.services.tokens import Principal

router = APIRouter(tags=["results"])

MAX_KEY = 200


def _key(request: Request) -> str | None:
    key = request.headers.get("idempotency-key")
    if key is None:
        return None
    key = key.strip()
    if not key or len(key) > MAX_KEY or not key.isprintable():
        raise ValidationProblem.at("Idempotency-Key", f"must be 1 to {MAX_KEY} printable characters")
    return key


def _parse_and_store(request: Request, body: bytes, principal: Principal | None) -> ingest.SubmitOutcome:
    batch = ResultsBatch.model_validate_json(body)
    return ingest.submit_results_retrying(
        database(request),
        batch,
        token_scope=principal.scope if principal else None,
        idempotency_key=_key(request),
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
async def submit_results(request: Request, principal: Principal | None = Depends(auth.submit)) -> Any:
    """Store a batch of results, all or nothing: 201 with the new run ids, 200 for a repeat."""
    body = await request.body()
    outcome = await run_in_threadpool(_parse_and_store, request, body, principal)
    return JSONResponse(
        {"run_ids": outcome.run_ids, "created": outcome.created}, status_code=201 if outcome.created else 200
    )


def openapi_components() -> dict[str, Any]:
    """JSON schemas of the batch, for the OpenAPI document (the route reads the body itself)."""
    schema = ResultsBatch.model_json_schema(ref_template="#/components/schemas/{model}")
    defs = schema.pop("$defs", {})
    return {**defs, "ResultsBatch": schema}
