"""The autoposter: posts the bot's server count at once and then every interval, as an asyncio task."""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
from typing import Any, Awaitable, Callable, Mapping, Optional, Union, cast

from .errors import ApiError
from .models import StatsBody, StatsResponse

__all__ = ["Autoposter", "start_autoposter", "DEFAULT_AUTOPOST_INTERVAL"]

logger = logging.getLogger("botdir")

#: Seconds between posts (30 minutes).
DEFAULT_AUTOPOST_INTERVAL = 1800.0

#: What ``stats`` returns: the server count, or ``{"server_count": …, "shard_id": …, "shard_count": …}``.
Stats = Union[int, StatsBody, Mapping[str, int]]
StatsSource = Callable[[], Union[Stats, Awaitable[Stats]]]


class Autoposter:
    """A running autoposter. ``stop()`` ends it for good; ``stopped`` is True after ``stop()`` or a 401."""

    def __init__(
        self,
        client: Any,
        stats: StatsSource,
        interval: float,
        on_error: Optional[Callable[[BaseException], Any]],
        on_post: Optional[Callable[[StatsResponse], Any]],
    ) -> None:
        self._client = client
        self._stats = stats
        self._interval = interval
        self._on_error = on_error
        self._on_post = on_post
        self._stopped = False
        self.task: "asyncio.Task[None]" = asyncio.get_running_loop().create_task(self._run(), name="botdir-autoposter")

    @property
    def stopped(self) -> bool:
        return self._stopped

    def stop(self) -> None:
        """Stops for good: no further post is made (a post in flight is cancelled)."""
        self._stopped = True
        if not self.task.done():
            self.task.cancel()

    async def _post(self) -> StatsResponse:
        value = self._stats()
        if inspect.isawaitable(value):
            value = await value
        if isinstance(value, bool):
            raise TypeError("stats() must return an int or a dict with server_count")
        if isinstance(value, int):
            args: Mapping[str, Any] = {"server_count": value}
        elif isinstance(value, Mapping):
            fields = cast(Mapping[str, Any], value)
            args = {k: fields[k] for k in ("server_count", "shard_id", "shard_count") if fields.get(k) is not None}
        else:
            raise TypeError("stats() must return an int or a dict with server_count")
        post = self._client.post_stats
        if inspect.iscoroutinefunction(post):
            answer: StatsResponse = await post(**args)
        else:  # a synchronous Client: its blocking call runs in a thread, never on the bot's loop
            answer = cast(StatsResponse, await asyncio.get_running_loop().run_in_executor(None, lambda: post(**args)))
        return answer

    def _call(self, hook: Optional[Callable[..., Any]], value: Any) -> None:
        if hook is None:
            return
        try:
            hook(value)
        except Exception:  # a failing hook must not end the poster
            logger.exception("autoposter hook failed")

    async def _run(self) -> None:
        while not self._stopped:
            wait = self._interval
            try:
                answer = await self._post()
            except asyncio.CancelledError:
                raise
            except Exception as error:
                if self._on_error is None:
                    logger.warning("botdir autoposter: %s", error)
                self._call(self._on_error, error)
                if isinstance(error, ApiError) and error.status == 401:
                    self._stopped = True  # the token is wrong or was replaced: a new one needs a new client
                    return
                if isinstance(error, ApiError) and error.status == 429 and error.retry_after is not None:
                    wait = max(wait, error.retry_after)
            else:
                self._call(self._on_post, answer)
            await asyncio.sleep(wait)


def start_autoposter(
    client: Any,
    stats: StatsSource,
    interval: float = DEFAULT_AUTOPOST_INTERVAL,
    on_error: Optional[Callable[[BaseException], Any]] = None,
    on_post: Optional[Callable[[StatsResponse], Any]] = None,
) -> Autoposter:
    """Posts ``stats()`` now and then every ``interval`` seconds, as a task on the running loop.

    ``client`` is an ``AsyncClient`` (or a ``Client``, whose calls then run in a thread). ``stats``
    returns (or is a coroutine function returning) the server count, or a dict with
    ``server_count`` and optionally ``shard_id``/``shard_count``. It never raises into the bot:
    failures go to ``on_error`` (default: a log warning) and the poster carries on, except after
    a 401, which stops it for good. A 429 whose wait the client did not take moves the next post
    to after the window. Call it where a loop runs, e.g. in discord.py's ``setup_hook``.
    """
    if isinstance(interval, bool) or not isinstance(interval, (int, float)) or not math.isfinite(interval) or interval <= 0:
        raise ValueError("interval must be a finite number of seconds > 0")
    return Autoposter(client, stats, float(interval), on_error, on_post)
