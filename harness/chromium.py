"""Headless Chromium driven over the DevTools protocol on a pipe (no extra library): load a page, wait for what a
person would see, read its text, take a screenshot. Used by tests/unit/test_dashboard.py and bench/dashboard_scale.py."""
from __future__ import annotations

import base64
import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

FLAGS = ("--headless", "--no-sandbox", "--no-zygote", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--remote-debugging-pipe")
# --no-zygote: without it Chromium hangs as root in a container; --virtual-time-budget is not used because an
# open server-sent event stream keeps virtual time from advancing.


def _protocol_fds(commands: int, replies: int) -> None:
    """In the child: the protocol pipe on fds 3 (commands in) and 4 (replies out), where Chromium expects it.
    Copied above 10 first so that neither end is overwritten; dup2's copies are inheritable, the rest are not."""
    high_in, high_out = fcntl.fcntl(commands, fcntl.F_DUPFD, 10), fcntl.fcntl(replies, fcntl.F_DUPFD, 10)
    os.dup2(high_in, 3)
    os.dup2(high_out, 4)


def binary() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Browser:
    """`with Browser() as b: b.open(url); b.wait_for("js condition"); b.text(); b.screenshot(path)`."""

    def __init__(self, width: int = 1400, height: int = 1300, timeout: float = 30.0) -> None:
        self.width, self.height, self.timeout = width, height, timeout
        self._profile = tempfile.mkdtemp(prefix="chromium-profile-")
        self._next_id = 0
        self._buffer = b""
        self.session: str | None = None

    def __enter__(self) -> "Browser":
        exe = binary()
        if exe is None:
            raise RuntimeError("chromium not found: apt-get install -y chromium")
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()
        self.process = subprocess.Popen(
            [exe, *FLAGS, f"--user-data-dir={self._profile}", f"--window-size={self.width},{self.height}",
             "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            close_fds=False, preexec_fn=lambda: _protocol_fds(to_chrome_r, from_chrome_w))
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.call("Emulation.setDeviceMetricsOverride", width=self.width, height=self.height,
                  deviceScaleFactor=1, mobile=False)
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.call("Browser.close", _session=False)
        except Exception:  # already gone
            pass
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for fd in (self._to_chrome, self._from_chrome):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self._profile, ignore_errors=True)

    def call(self, method: str, _session: bool = True, **params: Any) -> dict[str, Any]:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if _session and self.session:
            message["sessionId"] = self.session
        os.write(self._to_chrome, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            reply = self._read()
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
        raise TimeoutError(f"{method}: no reply within {self.timeout} s")

    def _read(self) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            chunk = os.read(self._from_chrome, 1 << 16)
            if not chunk:
                raise RuntimeError("chromium closed the protocol pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def open(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, condition: str, timeout: float = 15.0) -> Any:
        """Poll a JavaScript expression until it is truthy; its value."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                value = self.evaluate(condition)
            except RuntimeError:  # the page is still navigating
                value = None
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"the page never showed: {condition}\n--- page text ---\n{self.text()}")
            time.sleep(0.1)

    def text(self) -> str:
        """What a person reads: the rendered text of the page (hidden elements excluded)."""
        return self.evaluate("document.body ? document.body.innerText : ''") or ""

    def screenshot(self, path: str | Path) -> Path:
        data = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)["data"]
        Path(path).write_bytes(base64.b64decode(data))
        return Path(path)
