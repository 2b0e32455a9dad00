"""One contract, two languages: the package's event, answer and command types against the OpenAPI
document the running API serves (GET /api/v1/openapi.json). A field added, renamed, made optional
or retyped on either side fails here."""

from __future__ import annotations

from typing import Any, Dict

import pytest

from botdir import (
    Command,
    CommandsResponse,
    DeliveryAttempt,
    ErrorBody,
    RecoverResponse,
    RecoveryResponse,
    RedeliverResponse,
    StatsBody,
    StatsResponse,
    Vote,
    VoteAvailableEvent,
    VoteCheckResult,
    VoteEvent,
    VotesPage,
)
from botdir.models import DeliveryAttemptsResponse

from ..contract import drift
from .harness import Stack, http


@pytest.fixture(scope="module")
def schemas(stack: Stack) -> Dict[str, Any]:
    status, document = http("GET", stack.api + "/api/v1/openapi.json")
    assert status == 200
    found: Dict[str, Any] = document["components"]["schemas"]
    return found


def series_may_be_null(schema: Dict[str, Any]) -> Dict[str, Any]:
    """RedeliverResponse as the clients answer it: ``series`` is None when the answer of the try that
    started the redelivery was lost (the API itself always sends a number)."""
    properties = schema["properties"]
    return {**schema, "properties": {**properties, "series": {"anyOf": [properties["series"], {"type": "null"}]}}}


def event_may_be_absent(schema: Dict[str, Any]) -> Dict[str, Any]:
    """DeliveryAttempt as the clients type it: ``event`` may be absent (a server that does not send
    it; the API itself always does)."""
    return {**schema, "required": [name for name in schema.get("required", []) if name != "event"]}


def test_answers_and_the_event_match_the_document(schemas: Dict[str, Any]) -> None:
    attempts = schemas["DeliveryAttemptsResponse"]
    attempt = event_may_be_absent(attempts["properties"]["attempts"]["items"])
    listed = {**attempts["properties"]["attempts"], "items": attempt}
    attempts = {**attempts, "properties": {**attempts["properties"], "attempts": listed}}
    pairs = [
        (CommandsResponse, schemas["CommandsResponse"]),
        (StatsResponse, schemas["StatsResponse"]),
        (VoteCheckResult, schemas["VoteCheckResult"]),
        (VotesPage, schemas["VotesPage"]),
        (Vote, schemas["VotesPage"]["properties"]["votes"]["items"]),
        (DeliveryAttemptsResponse, attempts),
        (DeliveryAttempt, attempt),
        (RedeliverResponse, series_may_be_null(schemas["RedeliverResponse"])),
        (RecoverResponse, schemas["RecoverResponse"]),
        (RecoveryResponse, schemas["RecoveryResponse"]),
        (ErrorBody, schemas["Error"]),
        (VoteEvent, schemas["WebhookPayload"]),
        (VoteAvailableEvent, schemas["VoteAvailablePayload"]),
    ]
    problems = [p for cls, schema in pairs for p in drift(cls, schema)]
    assert problems == []


def test_the_bodies_sent_use_the_documents_fields(schemas: Dict[str, Any]) -> None:
    command = schemas["CommandsBody"]["properties"]["commands"]["items"]
    # Commands keep fields the package does not name (options, …): the named ones must match.
    assert drift(Command, command, request=True) == []
    assert set(command.get("required", [])) == set(Command.__required_keys__)
    assert drift(StatsBody, schemas["StatsBody"], request=True) == []
