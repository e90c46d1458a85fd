"""``web_fetch``: one URL, as Markdown, for documentation newer than the model.

Off unless ``config.toml`` has ``[web_fetch] enabled = true``; every call asks
for approval (kind ``web``: only ``full-auto`` or an allow rule runs it
unasked, plan mode refuses it). It runs in sparkcode's own process, outside the
shell sandbox, like Claude Code's WebFetch and Crush's fetch.

Guards, each a clear error for the model:

- only ``http``/``https``; the host is resolved and **every** address checked:
  loopback, private, link-local (cloud metadata at 169.254.169.254), multicast,
  reserved and unspecified addresses are refused unless ``allow_private``; each
  redirect (at most :data:`MAX_REDIRECTS`) is checked again. (The connection
  resolves the name once more; a DNS answer that changes in between is not
  caught, which ``allow_private = false`` does not claim to stop.)
- ``max_bytes`` of body at most (the rest is cut, and said so), ``timeout_s``
  for the whole fetch, redirects included;
- HTML becomes Markdown with ``markdownify`` (scripts, styles and navigation
  chrome dropped first); other text types come as they are; binary types are
  refused.
"""

from __future__ import annotations

import asyncio
import codecs
import ipaddress
import socket
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx
from bs4 import BeautifulSoup
from markdownify import MarkdownConverter

from ...config import WebFetchConfig
from ._base import Preview, Tool, ToolContext, ToolError, ToolOutput, cap_output

MAX_REDIRECTS = 5
_DROPPED_TAGS = ("script", "style", "noscript", "template", "svg", "nav", "footer", "iframe")
_TEXT_TYPES = (
    "text/",
    "application/json",
    "application/xml",
    "application/xhtml+xml",
    "application/javascript",
)


class WebFetch(Tool):
    def __init__(self, config: WebFetchConfig) -> None:
        super().__init__(
            name="web_fetch",
            description="Fetch a web page (http or https) and return it as Markdown, e.g. "
            "documentation newer than you know. The user approves each fetch.",
            parameters={"url": {"type": "string", "description": "The full URL."}},
            kind="web",
            required=("url",),
        )
        self.config = config

    async def preview(self, args: dict[str, Any], ctx: ToolContext) -> Preview:
        url = str(args.get("url", ""))
        return Preview(summary=f"fetch {url[:120]}", detail=url)

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        url = args.get("url")
        if not isinstance(url, str) or not url.strip():
            raise ToolError("url must be a non-empty string such as https://example.com/docs")
        try:
            status, ctype, body, cut = await asyncio.wait_for(
                self._fetch(url.strip()), self.config.timeout_s
            )
        except TimeoutError:
            raise ToolError(
                f"fetching {url} took longer than {self.config.timeout_s:g}s; gave up"
            ) from None
        text = body.decode(_charset(ctype), "replace")
        if "html" in ctype:
            text = html_to_markdown(text)
        head = f"# {url}\n\n(HTTP {status}, {ctype or 'no content type'}, {len(body)} bytes"
        head += f"; cut at {self.config.max_bytes} bytes)" if cut else ")"
        return ToolOutput(cap_output(f"{head}\n\n{text.strip()}", ctx.output_cap))

    async def _fetch(self, url: str) -> tuple[int, str, bytes, bool]:
        async with httpx.AsyncClient(
            follow_redirects=False, trust_env=False, headers={"User-Agent": "sparkcode-web-fetch"}
        ) as client:
            for _ in range(MAX_REDIRECTS + 1):
                await self._check(url)
                try:
                    async with client.stream("GET", url) as resp:
                        if resp.is_redirect and "location" in resp.headers:
                            url = urljoin(url, resp.headers["location"])
                            continue
                        ctype = resp.headers.get("content-type", "").lower()
                        if ctype and not ctype.startswith(_TEXT_TYPES):
                            raise ToolError(
                                f"{url} is {ctype.split(';')[0]}, not text; "
                                "web_fetch reads only HTML and text"
                            )
                        body, cut = bytearray(), False
                        async for chunk in resp.aiter_bytes():
                            body += chunk
                            if len(body) > self.config.max_bytes:
                                del body[self.config.max_bytes :]
                                cut = True
                                break
                        return resp.status_code, ctype, bytes(body), cut
                except httpx.HTTPError as exc:
                    raise ToolError(
                        f"could not fetch {url}: {type(exc).__name__}: {exc or 'no response'}"
                    ) from None
        raise ToolError(f"{url}: more than {MAX_REDIRECTS} redirects; not followed")

    async def _check(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ToolError(f"{url!r} is not an http(s) URL with a host")
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(
                parts.hostname,
                parts.port or (443 if parts.scheme == "https" else 80),
                type=socket.SOCK_STREAM,
            )
        except OSError as exc:
            raise ToolError(f"could not resolve {parts.hostname}: {exc}") from None
        if self.config.allow_private:
            return
        for info in infos:
            address = ipaddress.ip_address(str(info[4][0]).split("%")[0])
            if not address.is_global or address.is_multicast:
                raise ToolError(
                    f"refused: {parts.hostname} resolves to {address}, a local or private "
                    "address (set [web_fetch] allow_private = true in config.toml to allow it)"
                )


def html_to_markdown(html: str) -> str:
    """Readable Markdown from a page: the page chrome dropped, ATX headings."""
    soup = BeautifulSoup(html, "html.parser")
    for tag in soup(list(_DROPPED_TAGS)):
        tag.decompose()
    main = soup.find("main") or soup.find("article") or soup.body or soup
    text: str = MarkdownConverter(heading_style="ATX", bullets="-").convert_soup(main)
    lines = [line.rstrip() for line in text.splitlines()]
    out: list[str] = []
    for line in lines:  # at most one blank line in a row
        if line or (out and out[-1]):
            out.append(line)
    return "\n".join(out)


def _charset(ctype: str) -> str:
    """The response's declared charset when Python knows it, else UTF-8."""
    for part in ctype.split(";")[1:]:
        key, _, value = part.strip().partition("=")
        if key.lower() == "charset" and value.strip('"'):
            try:
                return codecs.lookup(value.strip('"')).name
            except LookupError:
                break
    return "utf-8"


__all__ = ["MAX_REDIRECTS", "WebFetch", "html_to_markdown"]
