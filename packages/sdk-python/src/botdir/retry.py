"""The spec's client guidance as a policy.

400, 401, 404 (any 4xx but 429) are never retried; a 429 waits ``retryAfter`` seconds when that is
within a bound; 5xx answers and network failures (a refused or dropped connection, a timeout) are
retried with exponential backoff and full jitter, for a bounded number of attempts.
"""

from __future__ import annotations

import math
import random as _random
from dataclasses import dataclass
from typing import Callable, Optional, Union

__all__ = ["RetryPolicy", "DEFAULT_RETRY", "retry_policy", "backoff_delay", "retry_delay"]


@dataclass(frozen=True)
class RetryPolicy:
    """Times in seconds.

    ``attempts``: attempts in all, the first included (default 4; 1 never retries).
    ``base_delay``: backoff cap before the first retry, doubled before each further one (0.5).
    ``max_delay``: largest backoff cap (30).
    ``max_retry_after``: longest 429 ``retryAfter`` waited out (60); a longer one is raised at once
    as an ``ApiError`` carrying ``retry_after``.
    """

    attempts: int = 4
    base_delay: float = 0.5
    max_delay: float = 30.0
    max_retry_after: float = 60.0

    def __post_init__(self) -> None:
        for name in ("attempts", "base_delay", "max_delay", "max_retry_after"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"retry {name} must be a number")
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"retry {name} must be a finite number >= 0")
        if self.attempts < 1 or int(self.attempts) != self.attempts:
            raise ValueError("retry attempts must be a whole number of at least 1")


DEFAULT_RETRY = RetryPolicy()


def retry_policy(retry: Union[RetryPolicy, bool, None]) -> RetryPolicy:
    """``None`` or ``True``: the defaults; ``False``: one attempt; a ``RetryPolicy`` as it is."""
    if retry is None or retry is True:
        return DEFAULT_RETRY
    if retry is False:
        return RetryPolicy(attempts=1)
    if not isinstance(retry, RetryPolicy):
        raise TypeError("retry must be a RetryPolicy, True, False or None")
    return retry


def backoff_delay(retry: int, policy: RetryPolicy, random: Callable[[], float] = _random.random) -> float:
    """Full jitter: a uniformly random wait between 0 and the exponential cap (``retry`` is 1 for the first retry)."""
    # 2.0 ** n overflows (OverflowError) past n = 1023: the exponent stops growing once the cap is reached.
    cap = min(policy.max_delay, policy.base_delay * (2.0 ** min(retry - 1, 64)))
    return random() * cap


def retry_delay(
    status: Optional[int],
    attempts_made: int,
    policy: RetryPolicy,
    retry_after: Optional[float] = None,
    random: Callable[[], float] = _random.random,
) -> Optional[float]:
    """Seconds to wait before the next attempt, or ``None`` when the outcome is final.

    ``status`` is the answer's status, or ``None`` for a network failure. Final: the last attempt,
    a status that is never retried, or a 429 whose wait exceeds ``max_retry_after``.
    """
    if attempts_made >= policy.attempts:
        return None
    if status is None:
        return backoff_delay(attempts_made, policy, random)
    if status == 429:
        wait = max(1.0, retry_after if retry_after is not None else 1.0)
        return wait if wait <= policy.max_retry_after else None
    if status >= 500:
        return backoff_delay(attempts_made, policy, random)
    return None
