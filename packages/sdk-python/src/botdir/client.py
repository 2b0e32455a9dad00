"""The synchronous client, on the standard library only (``urllib``)."""

from __future__ import annotations

import http.client
import socket
import time
import urllib.error
import urllib.request
from datetime import datetime
from typing import Any, Iterator, List, Optional, Sequence, Union

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

__all__ = ["Client"]

_NETWORK_ERRORS = (urllib.error.URLError, OSError, http.client.HTTPException, socket.timeout)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class Client(ClientBase):
    """Client of the directory's API for one bot; every method retries as ``retry`` says.

    ``Client(base_url="https://botdir.example", token=..., bot_id=...)``. ``retry``: a
    ``RetryPolicy``, ``False`` for one attempt, or ``None`` for the defaults. ``timeout``: seconds
    one attempt may take (a timeout is retried like a network error).
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        bot_id: str,
        *,
        retry: Union[RetryPolicy, bool, None] = None,
        timeout: float = 15.0,
    ) -> None:
        super().__init__(base_url, token, bot_id, retry, timeout)
        self._opener = urllib.request.build_opener(_NoRedirect())

    def post_stats(
        self, server_count: int, shard_id: Optional[int] = None, shard_count: Optional[int] = None
    ) -> StatsResponse:
        """POST /stats: the server count (of the bot, or of one shard with ``shard_id``/``shard_count``)."""
        answer: StatsResponse = self._call(
            self._build("POST", "/stats", body=stats_body(server_count, shard_id, shard_count))
        )
        return answer

    def put_commands(self, commands: Sequence[Command]) -> CommandsResponse:
        """PUT /commands: replaces the whole command list (an empty list clears it)."""
        answer: CommandsResponse = self._call(self._build("PUT", "/commands", body=commands_body(commands)))
        return answer

    def check(self, user_id: str) -> VoteCheckResult:
        """GET /check: whether the user is inside the 12-hour vote window."""
        answer: VoteCheckResult = self._call(self._build("GET", "/check", {"userId": str(user_id)}))
        return answer

    def has_voted(self, user_id: str) -> bool:
        """True when the user voted in the last 12 hours."""
        return bool(self.check(user_id)["hasVoted"])

    def votes(self, limit: Optional[int] = None) -> List[Vote]:
        """GET /votes: the newest votes, newest first (``limit`` 1–100, server default 50)."""
        page = self._call(self._build("GET", "/votes", {"limit": limit}))
        votes: List[Vote] = page["votes"]
        return votes

    def votes_since(self, since: Union[datetime, str], limit: int = 100) -> Iterator[Vote]:
        """Every settled vote at or after ``since``, oldest first, page by page.

        Votes younger than 10 seconds are not yet listed: the iterator ends at the newest settled
        vote. Iterate again later from the last ``voted_at`` to catch up.
        """
        query: Query = {"since": since_text(since), "limit": limit}
        while True:
            page = self._call(self._build("GET", "/votes", query))
            yield from page["votes"]
            cursor = page.get("nextCursor")
            if not isinstance(cursor, str):
                return
            query = {"since": query["since"], "cursor": cursor, "limit": limit}

    def webhook_deliveries(self) -> List[DeliveryAttempt]:
        """GET /webhook/deliveries: the last ten delivery attempts, newest first."""
        answer = self._call(self._build("GET", "/webhook/deliveries"))
        attempts: List[DeliveryAttempt] = answer["attempts"]
        return attempts

    def recover(
        self, since: Union[datetime, str], until: Union[datetime, str, None] = None
    ) -> RecoverResponse:
        """POST /webhook/recover: sends every vote since ``since`` (up to ``until``, default now) whose
        delivery did not succeed again; the window may reach back 14 days.

        Answers the recovery's id and the number of votes queued. A 409 names a recovery over an
        overlapping window that still runs (also the one a lost answer's try started), or says the
        webhook is disabled (enable it first).
        """
        answer: RecoverResponse = self._call(
            self._build("POST", "/webhook/recover", body=recover_body(since, until))
        )
        return answer

    def recovery(self, recovery_id: str) -> RecoveryResponse:
        """GET /webhook/recoveries/{id}: a recovery's counts (queued, delivered, failed, pending)."""
        answer: RecoveryResponse = self._call(self._build("GET", recovery_path(recovery_id)))
        return answer

    def redeliver(self, delivery_id: str) -> RedeliverResponse:
        """POST …/redeliver: sends a delivered or failed delivery again (a fresh series of attempts).

        When a try lost its answer (timeout, dropped connection, 5xx) and the retry is told 409
        (``X-Botdir-Conflict: delivery_pending``), the first try started the series: that is reported as started, with ``series``
        None (its number is not known).
        """
        answer = self._call(self._build("POST", redeliver_path(delivery_id)), lost_conflict=True)
        if answer is None:
            return started_after_lost_answer(delivery_id)
        result: RedeliverResponse = answer
        return result

    def _call(self, request: Request, lost_conflict: bool = False) -> Any:
        lost = False
        attempt = 0
        while True:
            attempt += 1
            try:
                req = urllib.request.Request(
                    request.url, data=request.body, method=request.method, headers=request.headers
                )
                try:
                    with self._opener.open(req, timeout=self._timeout) as response:
                        status = response.status
                        header = response.headers.get("retry-after")
                        conflict = response.headers.get("x-botdir-conflict")
                        raw = response.read()
                except urllib.error.HTTPError as error:
                    status = error.code
                    header = error.headers.get("retry-after") if error.headers else None
                    conflict = error.headers.get("x-botdir-conflict") if error.headers else None
                    raw = error.read()
                    error.close()
            except _NETWORK_ERRORS:
                lost = True
                delay = retry_delay(None, attempt, self._policy)
                if delay is None:
                    raise
                time.sleep(delay)
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
                time.sleep(delay)
