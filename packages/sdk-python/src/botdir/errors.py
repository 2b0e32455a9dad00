"""The package's exceptions."""

from __future__ import annotations

from typing import Optional

__all__ = ["ApiError", "WebhookVerificationError", "WEBHOOK_VERIFICATION_REASONS"]


class ApiError(Exception):
    """A non-2xx answer of the API (or a 2xx whose body is not the JSON it should be).

    ``status`` is the HTTP status, ``message`` the error sentence of the body, ``retry_after``
    the seconds until the rate-limit window resets (429 only), ``body`` the parsed JSON body,
    ``conflict`` a 409's cause (the ``X-Botdir-Conflict`` header).
    """

    def __init__(
        self,
        status: int,
        message: str,
        retry_after: Optional[float] = None,
        body: object = None,
        conflict: Optional[str] = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.retry_after = retry_after
        self.body = body
        #: A 409's cause, from the ``X-Botdir-Conflict`` header (``delivery_pending``, ``no_webhook``, …);
        #: None for other statuses or when the answer named none.
        self.conflict = conflict

    def __repr__(self) -> str:
        return (
            f"ApiError(status={self.status!r}, message={self.message!r}, retry_after={self.retry_after!r}, "
            f"conflict={self.conflict!r})"
        )


#: Why ``verify_webhook`` refused a request (the same reasons as the TypeScript SDK's):
#:
#: - ``missing_signature``: neither the Standard Webhooks headers nor ``X-Webhook-Signature-256``
#: - ``malformed_timestamp``: ``webhook-timestamp`` is not Unix seconds
#: - ``timestamp_out_of_tolerance``: ``webhook-timestamp`` is further from this clock than the tolerance
#: - ``invalid_signature``: no signature matches any of the secrets (a changed body, a wrong secret)
#: - ``invalid_authorization``: legacy headers only, and ``Authorization`` is not one of the secrets
#: - ``invalid_body``: the signature is valid but the body is not a JSON webhook event
WEBHOOK_VERIFICATION_REASONS = (
    "missing_signature",
    "malformed_timestamp",
    "timestamp_out_of_tolerance",
    "invalid_signature",
    "invalid_authorization",
    "invalid_body",
)


class WebhookVerificationError(Exception):
    """Raised by ``verify_webhook``; ``reason`` says why (never the secret or the expected signature)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
