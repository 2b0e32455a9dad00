"""The API's request and response bodies, with the API's own field names.

Answers are plain dicts; these ``TypedDict`` classes describe them for type checkers. They mirror
the OpenAPI document the API serves (``GET /api/v1/openapi.json``, components ``CommandsBody``,
``CommandsResponse``, ``StatsBody``, ``StatsResponse``, ``VoteCheckResult``, ``VotesPage``,
``DeliveryAttemptsResponse``, ``RedeliverResponse``, ``Error`` and ``WebhookPayload``); the
package's end-to-end suite compares them with that document and fails when they drift. Two fields
are wider than the document's: ``RedeliverResponse.series`` may be None, and
``DeliveryAttempt.event`` may be absent (see there).
"""

from __future__ import annotations

from typing import Dict, List, Literal, Optional, TypedDict, Union

__all__ = [
    "Command",
    "CommandsResponse",
    "StatsBody",
    "StatsResponse",
    "VoteCheckResult",
    "Vote",
    "VotesPage",
    "DeliveryAttempt",
    "DeliveryAttemptsResponse",
    "RedeliverResponse",
    "ErrorBody",
    "VoteEvent",
    "VoteAvailableEvent",
    "VoteWebhookPayload",
    "WebhookTestEvent",
    "WebhookEvent",
]


class _CommandRequired(TypedDict):
    name: str


class Command(_CommandRequired, total=False):
    """A command as the chat platform describes it (name 1–32; description 1–100; other fields kept)."""

    description: str
    type: int


class CommandsResponse(TypedDict):
    """Answer of ``put_commands``: ``count`` is the number of commands kept after de-duplication."""

    success: bool
    count: int


class StatsBody(TypedDict, total=False):
    """What ``post_stats`` sends: the server count, of the bot or of one shard."""

    server_count: int
    shard_id: int
    shard_count: int


class StatsResponse(TypedDict):
    """Answer of ``post_stats``: the count posted (the bot's stored count is the shards' sum when posting per shard)."""

    success: bool
    server_count: int


class VoteCheckResult(TypedDict):
    """Outside the window: ``voted`` 0, ``hasVoted`` False, both times None."""

    voted: Literal[0, 1]
    hasVoted: bool
    votedAt: Optional[str]
    nextVoteAt: Optional[str]


class Vote(TypedDict):
    """One vote of the log: user id and time (ISO 8601 UTC with milliseconds and ``Z``)."""

    user_id: str
    voted_at: str


class _VotesPageRequired(TypedDict):
    votes: List[Vote]


class VotesPage(_VotesPageRequired, total=False):
    """A page of ``GET /votes?since=&cursor=``, oldest first; ``nextCursor`` is absent on the last page."""

    nextCursor: str


class _DeliveryAttemptRequired(TypedDict):
    deliveryId: str
    attempt: int
    series: int
    statusCode: Optional[int]
    errorKind: Optional[str]
    outcome: Literal["delivered", "failed"]
    deliveryState: Literal["pending", "delivered", "failed"]
    attemptedAt: str
    traceId: Optional[str]
    """The trace the attempt belongs to (32 lowercase hex), as ``X-Webhook-Trace`` carried it; quote it to support."""
    test: bool
    recovered: bool
    """True for an attempt of the series a recovery (``recover``) started."""


class DeliveryAttempt(_DeliveryAttemptRequired, total=False):
    """One webhook delivery attempt, as the bot's edit page lists it."""

    event: Optional[Literal["vote.create", "vote.available"]]
    """The event its delivery carries; None for a test event. Absent when the server does not send it:
    read it with ``attempt.get("event")``."""


class DeliveryAttemptsResponse(TypedDict):
    attempts: List[DeliveryAttempt]


class RedeliverResponse(TypedDict):
    """Answer of ``redeliver``: the series just started (1 for the first redelivery).

    ``series`` is None when the answer of the try that started it was lost (a timeout, a dropped
    connection, a 5xx) and the client's retry was told the delivery is pending (409): the
    redelivery did start, its number is not known.
    """

    deliveryId: str
    state: Literal["pending", "delivered", "failed"]
    series: Optional[int]


class RecoverResponse(TypedDict):
    """Answer of ``recover``: the recovery's id and the number of votes it sends again."""

    recoveryId: str
    queued: int


class RecoveryResponse(TypedDict):
    """A recovery's progress (``recovery``): ``pending`` is neither delivered nor failed yet."""

    recoveryId: str
    state: Literal["running", "done", "stopped"]
    since: str
    until: str
    queued: int
    delivered: int
    failed: int
    pending: int
    createdAt: str
    finishedAt: Optional[str]


class _ErrorBodyRequired(TypedDict):
    error: str


class ErrorBody(_ErrorBodyRequired, total=False):
    """Every failure's body: one sentence, plus ``retryAfter`` (seconds) on 429."""

    retryAfter: int


class _VoteEventRequired(TypedDict):
    event: Literal["vote.create"]
    bot_id: str
    user_id: str
    voted_at: str


class VoteEvent(_VoteEventRequired, total=False):
    """The body of a ``vote.create`` webhook; ``query`` (the vote page's query string, a flat map of
    strings) is present only when the site passed one with the vote."""

    query: Dict[str, str]


class VoteAvailableEvent(TypedDict):
    """The body of a ``vote.available`` webhook: the vote's 12-hour window ended at ``available_at``."""

    event: Literal["vote.available"]
    bot_id: str
    user_id: str
    voted_at: str
    available_at: str


#: Either vote event; ``event["event"]`` tells them apart.
VoteWebhookPayload = Union[VoteEvent, VoteAvailableEvent]


class WebhookTestEvent(TypedDict):
    """The body of a test event (sent from the edit page); never enters the vote log."""

    event: Literal["webhook.test"]
    bot_id: str
    test: bool
    sent_at: str


#: What a webhook carries. Switch on ``event["event"]``: more kinds may be added.
WebhookEvent = Union[VoteEvent, VoteAvailableEvent, WebhookTestEvent]
