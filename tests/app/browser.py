"""A headless Chromium driven over the DevTools protocol (no selenium): enough to load a page,
run JavaScript, click and type as a person does (mouse and key events, not element.click()),
wait for a condition, list the requests it made and the ones that failed, throttle uploads and
take a screenshot."""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
from websockets.sync.client import connect

FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-default-apps", "--disable-extensions", "--mute-audio",
    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",  # nothing but loopback
    "--window-size=1280,900", "--remote-debugging-port=0",
]


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if path := shutil.which(name):
            return path
    return None


class Browser:
    def __init__(self, binary: str) -> None:
        self.profile = tempfile.TemporaryDirectory(prefix="nmt-chromium-")
        self.proc = subprocess.Popen(
            [binary, *FLAGS, f"--user-data-dir={self.profile.name}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,  # its helper processes share a group that close() ends
        )
        port_file = Path(self.profile.name) / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not port_file.exists() or not port_file.read_text().strip():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.close()
                raise RuntimeError("chromium did not start")
            time.sleep(0.05)
        port = int(port_file.read_text().split()[0])
        pages = httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=5).json()
        page = next(p for p in pages if p["type"] == "page")
        self._stack = contextlib.ExitStack()
        self.ws = self._stack.enter_context(
            connect(page["webSocketDebuggerUrl"], max_size=None, open_timeout=10)
        )
        self.ids = itertools.count(1)
        self.requests: list[str] = []
        self.failed: list[dict] = []  # Network.loadingFailed: canceled, errorText, requestId
        self.exceptions: list[str] = []  # the page's uncaught errors and unhandled rejections
        self.send("Page.enable")
        self.send("Network.enable")
        self.send("Runtime.enable")

    def send(self, method: str, **params) -> dict:
        msg_id = next(self.ids)
        self.ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv(timeout=30))
            if message.get("method") == "Network.requestWillBeSent":
                self.requests.append(message["params"]["request"]["url"])
            elif message.get("method") == "Network.loadingFailed":
                self.failed.append(message["params"])
            elif message.get("method") == "Runtime.exceptionThrown":
                details = message["params"]["exceptionDetails"]
                self.exceptions.append(details.get("exception", {}).get("description")
                                       or details.get("text", ""))
            if message.get("id") == msg_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})

    def evaluate(self, expression: str):
        result = self.send("Runtime.evaluate", expression=expression, awaitPromise=True,
                           returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def navigate(self, url: str) -> None:
        self.send("Page.navigate", url=url)

    def wait_for(self, expression: str, timeout: float = 20.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                value = self.evaluate(expression)
            except RuntimeError:
                value = None
            if value:
                return value
            time.sleep(0.1)
        raise TimeoutError(f"waited {timeout}s for {expression}")

    def click(self, selector: str) -> None:
        """A left click in the middle of the element, as the mouse would: it must be on screen
        and on top (a hidden or covered control gets no click)."""
        box = self.evaluate(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)});"
            " e.scrollIntoView({block: 'center'}); const r = e.getBoundingClientRect();"
            " const x = r.left + r.width / 2, y = r.top + r.height / 2;"
            " const top = document.elementFromPoint(x, y);"
            " return {x, y, onTop: e === top || e.contains(top)}; })()"
        )
        if not box["onTop"]:
            raise RuntimeError(f"{selector} is covered or off screen")
        for kind in ("mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", type=kind, x=box["x"], y=box["y"],
                      button="left", clickCount=1)

    def type_text(self, text: str) -> None:
        """Text typed into the focused element (input events fire as for a keyboard)."""
        self.send("Input.insertText", text=text)

    def press(self, key: str, ctrl: bool = False, shift: bool = False) -> None:
        """One key ('Enter', 'Tab', ...) pressed and released, with Ctrl or Shift held."""
        codes = {"Enter": 13, "Tab": 9, "Escape": 27}
        modifiers = (2 if ctrl else 0) | (8 if shift else 0)
        # a plain Enter carries its character, as a keyboard's does: that is what submits a form
        text = {"text": "\r"} if key == "Enter" and not modifiers else {}
        self.send("Input.dispatchKeyEvent", type="keyDown" if text else "rawKeyDown", key=key,
                  code=key, windowsVirtualKeyCode=codes[key], modifiers=modifiers, **text)
        self.send("Input.dispatchKeyEvent", type="keyUp", key=key, code=key,
                  windowsVirtualKeyCode=codes[key], modifiers=modifiers)

    def throttle_uploads(self, bytes_per_second: float) -> None:
        """Uploads at most this fast (-1: as fast as they go), so their progress can be seen."""
        self.send("Network.emulateNetworkConditions", offline=False, latency=0,
                  downloadThroughput=-1, uploadThroughput=bytes_per_second)

    def screenshot(self, path: Path) -> Path:
        data = self.send("Page.captureScreenshot", format="png")["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        if getattr(self, "_stack", None) is not None:
            self._stack.close()
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        # Chromium's helper processes can outlive it for a moment and still write into the
        # profile (a CI run failed removing its 'Default' directory): end the whole group, then
        # remove the profile, trying again while something still writes there
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        for _ in range(20):
            try:
                shutil.rmtree(self.profile.name)
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.1)
        shutil.rmtree(self.profile.name, ignore_errors=True)
        self.profile.cleanup()  # the TemporaryDirectory's own bookkeeping (nothing left)
