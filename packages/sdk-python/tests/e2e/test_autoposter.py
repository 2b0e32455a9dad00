"""start_autoposter against the real API: posts at once and every interval, stops for good on a
401 while a poster with a good token goes on, carries on after a failing stats()."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable, List

import pytest

from botdir import ApiError, AsyncClient, Client, StatsResponse, start_autoposter

from .clients import QUICK
from .harness import ScriptedProxy, Stack


async def until(check: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    """Polls ``check`` on the loop (the poster runs on it) until it is truthy, with a deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.05)


@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_it_posts_at_once_and_every_interval(stack: Stack, kind: str) -> None:
    bot = stack.known_bot()
    client: Any = (AsyncClient if kind == "async" else Client)(base_url=stack.api, token=bot["token"], bot_id=bot["id"], retry=QUICK)
    count = 100
    errors: List[BaseException] = []
    posted: List[StatsResponse] = []

    def stats() -> int:
        nonlocal count
        count += 1
        return count

    poster = start_autoposter(client, stats, interval=0.2, on_error=errors.append, on_post=posted.append)
    try:
        await until(lambda: posted, "the first post")
        assert posted[0] == {"success": True, "server_count": 101}
        assert stack.server_count(bot["id"]) is not None
        await until(lambda: len(posted) >= 3, "two more posts")
        assert (stack.server_count(bot["id"]) or 0) >= 103
    finally:
        poster.stop()
        if kind == "async":
            await client.close()
    assert errors == []
    assert poster.stopped


async def test_a_401_stops_it_for_good_while_a_poster_with_a_good_token_goes_on(stack: Stack, proxy: ScriptedProxy) -> None:
    bad, good = stack.known_bot(), stack.known_bot()
    errors: List[BaseException] = []
    good_posts: List[StatsResponse] = []
    async with AsyncClient(base_url=proxy.base, token="replaced-token", bot_id=bad["id"], retry=QUICK) as refused_client, AsyncClient(
        base_url=proxy.base, token=good["token"], bot_id=good["id"], retry=QUICK
    ) as good_client:
        refused = start_autoposter(refused_client, lambda: 1, interval=0.1, on_error=errors.append)
        # The sentinel: the same interval through the same proxy, so the refused poster had time to post again.
        sentinel = start_autoposter(good_client, lambda: {"server_count": 2}, interval=0.1, on_post=good_posts.append)
        try:
            await until(lambda: errors, "the 401")
            after = len(good_posts)
            await until(lambda: len(good_posts) >= after + 5, "five more posts of the sentinel")
            assert refused.stopped and not sentinel.stopped
        finally:
            sentinel.stop()
            refused.stop()
    assert proxy.to(bad["id"]) == [401]
    assert len(errors) == 1 and isinstance(errors[0], ApiError) and errors[0].status == 401


async def test_a_failing_stats_goes_to_on_error_and_the_poster_carries_on(stack: Stack) -> None:
    bot = stack.known_bot()
    calls = 0
    errors: List[BaseException] = []

    async def stats() -> int:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("shards not ready")
        return 77

    async with AsyncClient(base_url=stack.api, token=bot["token"], bot_id=bot["id"], retry=QUICK) as client:
        poster = start_autoposter(client, stats, interval=0.1, on_error=errors.append)
        try:
            await until(lambda: stack.server_count(bot["id"]) == 77, "a post after the failure")
        finally:
            poster.stop()
    assert [str(e) for e in errors] == ["shards not ready"]


async def test_the_interval_must_be_a_positive_finite_number() -> None:
    client = Client(base_url="http://127.0.0.1:9", token="t", bot_id="1")
    for bad in (0, -1, float("inf"), float("nan")):
        with pytest.raises(ValueError):
            start_autoposter(client, lambda: 1, interval=bad)
