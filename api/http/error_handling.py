"""One JSON error shape for every failure: ``{"error": {"code", "message", "details"}}``.

Every ``EpimemError`` carries its HTTP status and code; validation errors, unknown routes and wrong
methods are rendered in the same shape, so a client needs one parser.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from api.errors import TooManyRequestsError
from memory.errors import EpimemError, StoreUnavailableError

log = logging.getLogger("epimem.api")

_HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "invalid_input",
    429: "too_many_requests",
    503: "unavailable",
}


class ErrorDetail(BaseModel):
    code: str = Field(description="stable machine-readable code, e.g. `invalid_input`, `not_found`, `forbidden`")
    message: str = Field(description="what is wrong, for people")
    details: Any = Field(default=None, description="structured context, e.g. the invalid fields")


class ErrorBody(BaseModel):
    error: ErrorDetail


def error_response(
    status: int, code: str, message: str, details: Any = None, headers: dict[str, str] | None = None
) -> JSONResponse:
    body = {"error": {"code": code, "message": message, "details": jsonable_encoder(details)}}
    return JSONResponse(status_code=status, content=body, headers=headers)


def _validation_details(errors: Any) -> list[dict[str, Any]]:
    """Where and what, without echoing the (possibly large or private) input back."""
    return [
        {"loc": list(error.get("loc", ())), "msg": str(error.get("msg", "")), "type": str(error.get("type", ""))}
        for error in errors
    ]


async def _epimem_error(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, EpimemError)
    headers = None
    if isinstance(error, StoreUnavailableError | TooManyRequestsError):
        headers = {"Retry-After": str(error.retry_after)}
    if error.status_code >= 500:
        log.error("request failed: %s (%s)", error.code, error.message)
    return error_response(error.status_code, error.code, error.message, error.details, headers)


async def _request_validation_error(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, RequestValidationError)
    details = _validation_details(error.errors())
    if not details:
        return error_response(422, "invalid_input", "invalid request", details)
    where = ".".join(str(part) for part in details[0]["loc"])
    message = str(details[0]["msg"])
    return error_response(422, "invalid_input", f"{where}: {message}" if where else message, details)


async def _model_validation_error(request: Request, error: Exception) -> JSONResponse:
    # A domain model built from request data inside a route (e.g. a Scope from query parameters).
    assert isinstance(error, ValidationError)
    details = _validation_details(error.errors())
    return error_response(422, "invalid_input", f"invalid {error.title}: {details[0]['msg']}", details)


async def _http_error(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, StarletteHTTPException)
    if error.status_code == 400:
        # FastAPI's "error parsing the body" (e.g. bytes that are not UTF-8): one status for bad input.
        return error_response(422, "invalid_input", f"body: {error.detail}")
    code = _HTTP_CODES.get(error.status_code, "http_error")
    headers = dict(error.headers) if error.headers else None
    return error_response(error.status_code, code, str(error.detail), None, headers)


async def _out_of_range(request: Request, error: Exception) -> JSONResponse:
    # Date arithmetic on input near year 1 or 9999 (e.g. "30 days before 0001-01-05"): the input's fault.
    return error_response(
        422, "invalid_input", "a date (or number) in the request reaches outside the range epimem can represent"
    )


async def _unexpected_error(request: Request, error: Exception) -> JSONResponse:
    log.exception("unexpected error while handling a request")
    return error_response(500, "internal_error", "internal error; see the server log with this request id")


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(EpimemError, _epimem_error)
    app.add_exception_handler(RequestValidationError, _request_validation_error)
    app.add_exception_handler(ValidationError, _model_validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(OverflowError, _out_of_range)
    app.add_exception_handler(Exception, _unexpected_error)


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` entries for the given error statuses, all with the one error body."""
    descriptions = {
        401: "missing or unknown API key",
        403: "the key may not do this in this group (says nothing about whether the group exists); "
        "in local mode: a client, Host or Origin that is not this machine",
        404: "not found",
        409: "conflict (e.g. a message id already stored with other content)",
        413: "request body too large",
        415: "a request that changes state takes JSON (application/json, or application/x-ndjson to import)",
        422: "invalid input",
        429: "over a limit of the key or the group (`details.limit` names it); retry after `Retry-After` seconds",
        503: "the vector store is unavailable; retry after `Retry-After` seconds",
    }
    return {status: {"model": ErrorBody, "description": descriptions.get(status, "error")} for status in statuses}
