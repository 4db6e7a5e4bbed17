"""A headless Chromium driven over the DevTools protocol through ``--remote-debugging-pipe``
(JSON messages, NUL-terminated, on fds 3 and 4): no websocket client, no browser driver package.

``load(path)`` opens a file, waits for its load event, and returns what the page logged as an
error, every request it made, and the values of JavaScript expressions evaluated in it.
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def find_browser() -> str | None:
    return next((p for p in (shutil.which(b) for b in BROWSERS) if p), None)


@dataclass
class PageLoad:
    errors: list[str] = field(default_factory=list)  # console errors, exceptions, CSP violations, failed loads
    requests: list[str] = field(default_factory=list)  # every URL the page asked for
    values: dict[str, Any] = field(default_factory=dict)


class Browser:
    def __init__(self, binary: str) -> None:
        self.profile = tempfile.mkdtemp(prefix="trtconv-chromium-")
        to_child, self._write = os.pipe()
        self._read, from_child = os.pipe()

        args = ["--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe", "--no-first-run",
                "--disable-extensions", "--disable-background-networking", "--disable-component-update",
                f"--user-data-dir={self.profile}", "about:blank"]
        def onto_3_and_4() -> None:  # in the child: the browser reads commands on fd 3, answers on fd 4
            high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_child, from_child)]  # out of 3/4's way
            os.dup2(high[0], 3)  # dup2's copies are inheritable; Python's own fds are not (PEP 446)
            os.dup2(high[1], 4)

        self.proc = subprocess.Popen([binary, *args], close_fds=False, preexec_fn=onto_3_and_4,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_child)
        os.close(from_child)
        self._buf = b""
        self._id = 0
        self.events: list[dict[str, Any]] = []

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None,
             timeout: float = 15.0) -> dict[str, Any]:
        self._id += 1
        msg: dict[str, Any] = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._write, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._next(deadline)
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return dict(reply.get("result") or {})
            self.events.append(reply)

    def _next(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._read], [], [], left)[0]:
                raise TimeoutError("no answer from chromium")
            chunk = os.read(self._read, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed the DevTools pipe")
            self._buf += chunk
        raw, _, self._buf = self._buf.partition(b"\0")
        return dict(json.loads(raw))

    def wait_for(self, method: str, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while not any(e.get("method") == method for e in self.events):
            self.events.append(self._next(deadline))

    def load(self, path: Path, expressions: dict[str, str]) -> PageLoad:
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Runtime", "Log", "Network", "Page"):
            self.send(f"{domain}.enable", session=session)
        self.events.clear()
        self.send("Page.navigate", {"url": path.resolve().as_uri()}, session=session)
        self.wait_for("Page.loadEventFired")
        time.sleep(0.3)  # late console messages (a CSP report comes after the load event)
        result = PageLoad()
        for name, expr in expressions.items():
            got = self.send("Runtime.evaluate", {"expression": expr, "returnByValue": True}, session=session)
            result.values[name] = (got.get("result") or {}).get("value")
        for e in self.events:
            method, p = e.get("method"), e.get("params") or {}
            if method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                result.errors.append(" ".join(str(a.get("value", a.get("description"))) for a in p.get("args", [])))
            elif method == "Runtime.exceptionThrown":
                result.errors.append(str((p.get("exceptionDetails") or {}).get("text")))
            elif method == "Log.entryAdded" and (p.get("entry") or {}).get("level") == "error":
                result.errors.append(str(p["entry"].get("text")))
            elif method == "Network.loadingFailed":
                result.errors.append(f"request failed: {p.get('errorText')}")
            elif method == "Network.requestWillBeSent":
                result.requests.append(str((p.get("request") or {}).get("url")))
        self.send("Target.closeTarget", {"targetId": target})
        return result

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=5)
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._read, self._write):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)
