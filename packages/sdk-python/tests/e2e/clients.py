"""The synchronous and the asyncio client behind one awaitable face, so each test runs on both."""

from __future__ import annotations

import inspect
from typing import Any, Dict, List

from botdir import AsyncClient, Client, RetryPolicy

#: Quick retries, so that the tests do not wait for the production backoff.
QUICK = RetryPolicy(base_delay=0.02, max_delay=0.1)


class Either:
    """Calls a ``Client`` or an ``AsyncClient`` the same way: ``await either.call("check", user)``."""

    def __init__(self, kind: str, base_url: str, bot: Dict[str, str], **options: Any) -> None:
        options.setdefault("retry", QUICK)
        self.kind = kind
        self.client: Any = (Client if kind == "sync" else AsyncClient)(
            base_url=base_url, token=bot["token"], bot_id=bot["id"], **options
        )

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        result = getattr(self.client, method)(*args, **kwargs)
        return await result if inspect.isawaitable(result) else result

    async def votes_since(self, since: Any) -> List[Any]:
        if self.kind == "sync":
            return list(self.client.votes_since(since))
        return [vote async for vote in self.client.votes_since(since)]

    async def close(self) -> None:
        if self.kind == "async":
            await self.client.close()
