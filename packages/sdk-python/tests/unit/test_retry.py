"""The retry policy: which outcomes are retried, and how long the waits are."""

from __future__ import annotations

import math

import pytest

from botdir import DEFAULT_RETRY, RetryPolicy
from botdir.retry import backoff_delay, retry_delay, retry_policy


def test_4xx_but_429_are_never_retried() -> None:
    for status in (400, 401, 403, 404, 409, 413):
        assert retry_delay(status, 1, DEFAULT_RETRY) is None


def test_429_waits_retry_after_within_the_bound() -> None:
    assert retry_delay(429, 1, DEFAULT_RETRY, retry_after=3) == 3
    assert retry_delay(429, 1, DEFAULT_RETRY, retry_after=0) == 1
    assert retry_delay(429, 1, DEFAULT_RETRY) == 1
    assert retry_delay(429, 1, DEFAULT_RETRY, retry_after=61) is None
    assert retry_delay(429, 1, RetryPolicy(max_retry_after=0), retry_after=1) is None


def test_5xx_and_network_errors_back_off_with_full_jitter() -> None:
    policy = RetryPolicy(base_delay=0.5, max_delay=3)
    assert retry_delay(503, 1, policy, random=lambda: 0.999) == pytest.approx(0.4995)
    assert retry_delay(None, 2, policy, random=lambda: 1.0) == 1.0
    assert retry_delay(500, 3, policy, random=lambda: 0.0) == 0
    # The cap doubles and stops at max_delay.
    assert [backoff_delay(n, policy, lambda: 1.0) for n in (1, 2, 3, 4, 5)] == [0.5, 1, 2, 3, 3]


def test_the_last_attempt_is_final() -> None:
    assert retry_delay(503, 4, DEFAULT_RETRY) is None
    assert retry_delay(None, 1, retry_policy(False)) is None
    assert retry_delay(429, 4, DEFAULT_RETRY, retry_after=1) is None


def test_policy_values_are_checked() -> None:
    assert retry_policy(None) is DEFAULT_RETRY and retry_policy(True) is DEFAULT_RETRY
    assert retry_policy(False).attempts == 1
    for bad in ({"attempts": 0}, {"attempts": 1.5}, {"base_delay": -1}, {"max_delay": math.inf}, {"max_retry_after": math.nan}):
        with pytest.raises(ValueError):
            RetryPolicy(**bad)  # type: ignore[arg-type]
