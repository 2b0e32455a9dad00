"""The asyncio client, on aiohttp (the ``botdir[aiohttp]`` extra; discord.py already depends on it)."""

from __future__ import annotations

import asyncio
from datetime import datetime
from types import TracebackType
from typing import Any, AsyncIterator, List, Optional, Sequence, Type, Union

import aiohttp

from ._core import (
    DELIVERY_PENDING,
    ClientBase,
    Query,
    Request,
    commands_body,
    read_answer,
    recover_body,
    recovery_path,
    redeliver_path,
    since_text,
    started_after_lost_answer,
    stats_body,
)
from .errors import ApiError
from .retry import RetryPolicy, retry_delay
from .models import (
    Command,
    CommandsResponse,
    DeliveryAttempt,
    RecoverResponse,
    RecoveryResponse,
    RedeliverResponse,
    StatsResponse,
    Vote,
    VoteCheckResult,
)

__all__ = ["AsyncClient"]


class AsyncClient(ClientBase):
    """The asyncio twin of ``Client``: the same methods, awaited.

    Use it as ``async with AsyncClient(base_url=..., token=..., bot_id=...) as client:``, or call
    ``await client.close()`` yourself. Pass ``session`` to use an aiohttp session of yours (it is
    then not closed by the client).
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        bot_id: str,
        *,
        retry: Union[RetryPolicy, bool, None] = None,
        timeout: float = 15.0,
        session: Optional[aiohttp.ClientSession] = None,
    ) -> None:
        super().__init__(base_url, token, bot_id, retry, timeout)
        self._session = session
        self._own_session = session is None

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Closes the client's own session (a session given to it is left open)."""
        if self._own_session and self._session is not None:
            await self._session.close()
            self._session = None

    async def post_stats(
        self, server_count: int, shard_id: Optional[int] = None, shard_count: Optional[int] = None
    ) -> StatsResponse:
        """POST /stats: the server count (of the bot, or of one shard with ``shard_id``/``shard_count``)."""
        answer: StatsResponse = await self._call(
            self._build("POST", "/stats", body=stats_body(server_count, shard_id, shard_count))
        )
        return answer

    async def put_commands(self, commands: Sequence[Command]) -> CommandsResponse:
        """PUT /commands: replaces the whole command list (an empty list clears it)."""
        answer: CommandsResponse = await self._call(self._build("PUT", "/commands", body=commands_body(commands)))
        return answer

    async def check(self, user_id: str) -> VoteCheckResult:
        """GET /check: whether the user is inside the 12-hour vote window."""
        answer: VoteCheckResult = await self._call(self._build("GET", "/check", {"userId": str(user_id)}))
        return answer

    async def has_voted(self, user_id: str) -> bool:
        """True when the user voted in the last 12 hours."""
        return bool((await self.check(user_id))["hasVoted"])

    async def votes(self, limit: Optional[int] = None) -> List[Vote]:
        """GET /votes: the newest votes, newest first (``limit`` 1–100, server default 50)."""
        page = await self._call(self._build("GET", "/votes", {"limit": limit}))
        votes: List[Vote] = page["votes"]
        return votes

    async def votes_since(self, since: Union[datetime, str], limit: int = 100) -> AsyncIterator[Vote]:
        """Every settled vote at or after ``since``, oldest first, page by page (``async for``).

        Votes younger than 10 seconds are not yet listed: the iterator ends at the newest settled
        vote. Iterate again later from the last ``voted_at`` to catch up.
        """
        query: Query = {"since": since_text(since), "limit": limit}
        while True:
            page = await self._call(self._build("GET", "/votes", query))
            for vote in page["votes"]:
                yield vote
            cursor = page.get("nextCursor")
            if not isinstance(cursor, str):
                return
            query = {"since": query["since"], "cursor": cursor, "limit": limit}

    async def webhook_deliveries(self) -> List[DeliveryAttempt]:
        """GET /webhook/deliveries: the last ten delivery attempts, newest first."""
        answer = await self._call(self._build("GET", "/webhook/deliveries"))
        attempts: List[DeliveryAttempt] = answer["attempts"]
        return attempts

    async def recover(
        self, since: Union[datetime, str], until: Union[datetime, str, None] = None
    ) -> RecoverResponse:
        """POST /webhook/recover: sends every vote since ``since`` (up to ``until``, default now) whose
        delivery did not succeed again; the window may reach back 14 days.

        Answers the recovery's id and the number of votes queued. A 409 names a recovery over an
        overlapping window that still runs (also the one a lost answer's try started), or says the
        webhook is disabled (enable it first).
        """
        answer: RecoverResponse = await self._call(
            self._build("POST", "/webhook/recover", body=recover_body(since, until))
        )
        return answer

    async def recovery(self, recovery_id: str) -> RecoveryResponse:
        """GET /webhook/recoveries/{id}: a recovery's counts (queued, delivered, failed, pending)."""
        answer: RecoveryResponse = await self._call(self._build("GET", recovery_path(recovery_id)))
        return answer

    async def redeliver(self, delivery_id: str) -> RedeliverResponse:
        """POST …/redeliver: sends a delivered or failed delivery again (a fresh series of attempts).

        When a try lost its answer (timeout, dropped connection, 5xx) and the retry is told 409
        (``X-Botdir-Conflict: delivery_pending``), the first try started the series: that is reported as started, with ``series``
        None (its number is not known).
        """
        answer = await self._call(self._build("POST", redeliver_path(delivery_id)), lost_conflict=True)
        if answer is None:
            return started_after_lost_answer(delivery_id)
        result: RedeliverResponse = answer
        return result

    def _client_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            if not self._own_session:
                raise RuntimeError("the aiohttp session given to AsyncClient is closed")
            self._session = aiohttp.ClientSession()
        return self._session

    async def _call(self, request: Request, lost_conflict: bool = False) -> Any:
        session = self._client_session()
        timeout = aiohttp.ClientTimeout(total=self._timeout)
        lost = False
        attempt = 0
        while True:
            attempt += 1
            try:
                async with session.request(
                    request.method,
                    request.url,
                    headers=request.headers,
                    data=request.body,
                    timeout=timeout,
                    allow_redirects=False,
                ) as response:
                    status = response.status
                    header = response.headers.get("retry-after")
                    conflict = response.headers.get("x-botdir-conflict")
                    raw = await response.read()
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
                lost = True
                delay = retry_delay(None, attempt, self._policy)
                if delay is None:
                    raise
                await asyncio.sleep(delay)
                continue
            try:
                return read_answer(status, header, raw, conflict)
            except ApiError as error:
                if lost_conflict and lost and error.status == 409 and error.conflict == DELIVERY_PENDING:
                    return None
                if error.status >= 500:
                    lost = True
                if 200 <= error.status < 300:
                    raise
                delay = retry_delay(error.status, attempt, self._policy, error.retry_after)
                if delay is None:
                    raise
                await asyncio.sleep(delay)
