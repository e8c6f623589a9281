"""Admin API for tokens: create (the secret is in this one response only), list, revoke."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request

from ablate.backend.api import auth
from ablate.backend.api.deps import database
from ablate.backend.schemas.common import DbId
from ablate.backend.schemas.tokens import TokenCreate, TokenCreated, TokenOut
from ablate.backend.services import tokens

router = APIRouter(tags=["tokens"], dependencies=[Depends(auth.admin)])


@router.post("/tokens", status_code=201, response_model=TokenCreated)
def create_token(body: TokenCreate, request: Request) -> Any:
    with database(request).transaction() as session:
        token, secret = tokens.create_token(session, body.name, body.scope, body.expires_in)
        return {**TokenOut.model_validate(token).model_dump(), "secret": secret}


@router.get("/tokens", response_model=list[TokenOut])
def list_tokens(request: Request) -> Any:
    with database(request).read() as session:
        return [TokenOut.model_validate(t) for t in tokens.list_tokens(session)]


@router.post("/tokens/{token_id}/revoke", response_model=TokenOut)
def revoke_token(token_id: DbId, request: Request) -> Any:
    with database(request).transaction() as session:
        return TokenOut.model_validate(tokens.revoke_token(session, token_id))
