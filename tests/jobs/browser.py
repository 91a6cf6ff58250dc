"""
A headless Chromium driven over the DevTools protocol (through aiohttp's websocket client, which Ray's `default`
extra installs), for tests that use a web interface as a person does: log in with cookies, open a page, read the
DOM, press keys, drag the mouse, click.
"""

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp

CHROMIUM = next(
    (path for name in ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome")
     if (path := shutil.which(name))),
    None,
)  # fmt: skip


class Page:
    """One browser tab: DevTools commands and a few gestures built on them."""

    def __init__(self, socket: aiohttp.ClientWebSocketResponse):
        self._socket = socket
        self._sent = 0

    async def command(self, method: str, **params: Any) -> dict[str, Any]:
        self._sent += 1
        sent = self._sent
        await self._socket.send_json({"id": sent, "method": method, "params": params})
        while True:
            message = await self._socket.receive_json()
            if message.get("id") == sent:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})

    async def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression (JSON-able)."""
        result = await self.command("Runtime.evaluate", expression=expression, returnByValue=True)
        return result["result"].get("value")

    async def wait_for(self, expression: str, timeout_s: float = 90) -> Any:
        """The first truthy value of `expression`, polled every half second."""
        for _ in range(int(timeout_s * 2)):
            value = await self.evaluate(expression)
            if value:
                return value
            await asyncio.sleep(0.5)
        raise TimeoutError(f"never true: {expression[:200]}")

    async def press(self, key: str, code: str, key_code: int) -> None:
        await self.command("Input.dispatchKeyEvent", type="keyDown", key=key, code=code, text=key,
                           windowsVirtualKeyCode=key_code)  # fmt: skip
        await self.command("Input.dispatchKeyEvent", type="keyUp", key=key, code=code, windowsVirtualKeyCode=key_code)

    async def drag(self, start: tuple[float, float], end: tuple[float, float]) -> None:
        """A left-button drag, as a person selects text."""
        await self.command("Input.dispatchMouseEvent", type="mousePressed", x=start[0], y=start[1], button="left",
                           clickCount=1)  # fmt: skip
        middle = ((start[0] + end[0]) / 2, (start[1] + end[1]) / 2)
        for x, y in (middle, end):
            await self.command("Input.dispatchMouseEvent", type="mouseMoved", x=x, y=y, button="left")
        await self.command("Input.dispatchMouseEvent", type="mouseReleased", x=end[0], y=end[1], button="left",
                           clickCount=1)  # fmt: skip


@asynccontextmanager
async def browser_page(cookies: dict[str, str], url: str) -> AsyncIterator[Page]:
    """A page of a new headless Chromium (its own process group, stopped after) holding `cookies` for `url`."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", f"--remote-debugging-port={port}",
               "--window-size=1400,1000", "about:blank"]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        async with aiohttp.ClientSession() as session:
            targets = None
            for _ in range(100):
                try:
                    async with session.get(f"http://127.0.0.1:{port}/json/list") as response:
                        targets = json.loads(await response.text())
                    break
                except aiohttp.ClientError:
                    await asyncio.sleep(0.2)
            page_url = next(target["webSocketDebuggerUrl"] for target in targets or [] if target["type"] == "page")
            async with session.ws_connect(page_url, max_msg_size=0) as websocket:
                page = Page(websocket)
                for name, value in cookies.items():
                    await page.command("Network.setCookie", name=name, value=value, url=url)
                yield page
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)
