"""The server calls benchmarks make besides chat: ``/tokenize``, plain
``/v1/completions`` (prompt log-probabilities, prefill timing), ``/metrics``."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any

import httpx

from engine.errors import UserError
from sparkcode.agent.wire.metrics import RUNNING, WAITING, parse_metrics

from ._target import LiveTarget


@dataclass
class Timed:
    """A streamed completion's timing and final usage."""

    ttft_s: float | None
    total_s: float
    usage: dict[str, Any] | None
    text: str


class Server:
    """One target's HTTP API for the calls the chat client does not make."""

    def __init__(self, target: LiveTarget, timeout: float = 900.0) -> None:
        self.target = target
        self.http = httpx.AsyncClient(timeout=httpx.Timeout(timeout, connect=10.0))

    async def aclose(self) -> None:
        await self.http.aclose()

    async def __aenter__(self) -> Server:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _post(self, url: str, body: dict[str, Any]) -> httpx.Response:
        try:
            return await self.http.post(url, json=body, headers=self.target.headers())
        except httpx.TransportError as exc:
            raise UserError(
                f"cannot reach {self.target.label} at {url}: {type(exc).__name__}: {exc}"
            ) from None

    async def tokenize(self, text: str) -> list[int]:
        url = f"{self.target.root_url}/tokenize"
        response = await self._post(url, {"model": self.target.model, "prompt": text})
        if response.status_code == 404:
            raise UserError(
                f"{self.target.label} has no /tokenize (a vLLM endpoint): prompts "
                "of exact token lengths need it"
            )
        if response.status_code >= 400:
            raise UserError(f"{url}: HTTP {response.status_code}: {response.text[:200]}")
        tokens = response.json().get("tokens")
        if not isinstance(tokens, list):
            raise UserError(f"{url} returned no token list")
        return [int(t) for t in tokens]

    async def count(self, text: str) -> int:
        return len(await self.tokenize(text))

    async def completion(self, body: dict[str, Any]) -> dict[str, Any]:
        url = f"{self.target.base_url}/completions"
        response = await self._post(url, {"model": self.target.model, **body})
        if response.status_code >= 400:
            raise UserError(
                f"{self.target.label}: {url}: HTTP {response.status_code}: "
                f"{_message(response.text)}"
            )
        data: dict[str, Any] = response.json()
        return data

    async def timed_completion(self, body: dict[str, Any]) -> Timed:
        """A streamed completion: time to the first text, and the final usage."""
        url = f"{self.target.base_url}/completions"
        payload = {
            "model": self.target.model,
            **body,
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        }
        began = time.monotonic()
        first: float | None = None
        usage: dict[str, Any] | None = None
        text: list[str] = []
        buf = b""
        try:
            async with self.http.stream(
                "POST", url, json=payload, headers=self.target.headers()
            ) as response:
                if response.status_code >= 400:
                    raise UserError(
                        f"{self.target.label}: {url}: HTTP {response.status_code}"
                        f": {_message((await response.aread()).decode())}"
                    )
                async for chunk in response.aiter_bytes():
                    buf += chunk.replace(b"\r\n", b"\n")
                    *events, buf = buf.split(b"\n\n")
                    for event in events:
                        data = event.removeprefix(b"data: ").strip()
                        if not data or data == b"[DONE]":
                            continue
                        frame = json.loads(data)
                        # A token may decode to no text (a special or partial token):
                        # continuous usage still counts it, and it was the first token.
                        counted = (frame.get("usage") or {}).get("completion_tokens") or 0
                        for choice in frame.get("choices") or []:
                            if first is None and (choice.get("text") or counted >= 1):
                                first = time.monotonic()
                            if choice.get("text"):
                                text.append(choice["text"])
                        if isinstance(frame.get("usage"), dict):
                            usage = frame["usage"]
        except httpx.TransportError as exc:
            raise UserError(
                f"cannot reach {self.target.label} at {url}: {type(exc).__name__}: {exc}"
            ) from None
        return Timed(
            None if first is None else first - began, time.monotonic() - began, usage, "".join(text)
        )

    async def metrics(self) -> dict[str, float] | None:
        try:
            response = await self.http.get(f"{self.target.root_url}/metrics", timeout=10.0)
        except httpx.TransportError:
            return None
        if response.status_code != 200:
            return None
        try:
            return parse_metrics(response.text)
        except ValueError:
            return None

    async def wait_idle(self, timeout: float = 120.0) -> str:
        """Wait until the server runs no request; ``idle`` or ``unknown`` (no /metrics)."""
        deadline = time.monotonic() + timeout
        while True:
            scrape = await self.metrics()
            if scrape is None or RUNNING not in scrape:
                return "unknown"
            busy = int(scrape.get(RUNNING, 0) + scrape.get(WAITING, 0))
            if busy == 0:
                return "idle"
            if time.monotonic() > deadline:
                raise UserError(
                    f"{self.target.label} is busy ({busy} requests running or "
                    f"waiting for {timeout:.0f} s): benchmark numbers would be "
                    "shared with that traffic; try again when it is idle"
                )
            await asyncio.sleep(0.5)


def _message(text: str) -> str:
    try:
        data = json.loads(text)
    except ValueError:
        return text[:300]
    if isinstance(data, dict):
        inner = data.get("error", data)
        if isinstance(inner, dict):
            return str(inner.get("message") or inner)[:500]
        return str(inner)[:500]
    return text[:300]
