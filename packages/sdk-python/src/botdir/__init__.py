"""botdir: the official Python client of the bot directory API.

``Client`` (standard library only) and ``AsyncClient`` (aiohttp, the ``botdir[aiohttp]`` extra),
``start_autoposter``, ``verify_webhook`` and the receivers ``aiohttp_webhook`` and ``asgi_webhook``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .autoposter import DEFAULT_AUTOPOST_INTERVAL, Autoposter, start_autoposter
from .client import Client
from .errors import WEBHOOK_VERIFICATION_REASONS, ApiError, WebhookVerificationError
from .receivers import (
    DEFAULT_HANDLER_TIMEOUT,
    DEFAULT_MAX_BODY,
    Delivery,
    MemorySeenStore,
    SeenStore,
    WebhookReceiver,
    aiohttp_webhook,
    asgi_webhook,
)
from .retry import DEFAULT_RETRY, RetryPolicy
from .models import (
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
    VoteCheckResult,
    VoteAvailableEvent,
    VoteEvent,
    VoteWebhookPayload,
    VotesPage,
    WebhookEvent,
    WebhookTestEvent,
)
from .webhook import DEFAULT_TOLERANCE, VerifiedWebhook, verify_webhook

if TYPE_CHECKING:
    from .aio import AsyncClient

__version__ = "1.0.0"

__all__ = [
    "ApiError",
    "AsyncClient",
    "Autoposter",
    "Client",
    "Command",
    "CommandsResponse",
    "DEFAULT_AUTOPOST_INTERVAL",
    "DEFAULT_HANDLER_TIMEOUT",
    "DEFAULT_MAX_BODY",
    "DEFAULT_RETRY",
    "DEFAULT_TOLERANCE",
    "Delivery",
    "DeliveryAttempt",
    "ErrorBody",
    "MemorySeenStore",
    "RecoverResponse",
    "RecoveryResponse",
    "RedeliverResponse",
    "RetryPolicy",
    "SeenStore",
    "StatsBody",
    "StatsResponse",
    "VerifiedWebhook",
    "Vote",
    "VoteCheckResult",
    "VoteAvailableEvent",
    "VoteEvent",
    "VoteWebhookPayload",
    "VotesPage",
    "WEBHOOK_VERIFICATION_REASONS",
    "WebhookEvent",
    "WebhookReceiver",
    "WebhookTestEvent",
    "WebhookVerificationError",
    "aiohttp_webhook",
    "asgi_webhook",
    "start_autoposter",
    "verify_webhook",
]


def __getattr__(name: str) -> Any:
    # AsyncClient needs aiohttp (the `botdir[aiohttp]` extra): imported on first use only, so the
    # synchronous client and verify_webhook work without it.
    if name == "AsyncClient":
        from .aio import AsyncClient

        return AsyncClient
    raise AttributeError(f"module 'botdir' has no attribute {name!r}")
