"""Headless Chromium driven over the DevTools protocol: what a user's screen shows.

`--dump-dom` cannot say whether a header is cut or a column lies right of the screen;
the DevTools protocol (a websocket, `websocket-client`) can: the page is loaded in a
fresh profile at a given window size, the test waits until the runs table has
rendered, then reads each header's and cell's box and whether its text overflows.
"""

from __future__ import annotations

import base64
import itertools
import json
import re
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _arial_metric_font() -> bool:
    """Whether fontconfig gives Arial's metrics (Arial or Liberation Sans): what the runs
    table's widths are sized for (tracking/runs_table_view.py)."""
    if shutil.which("fc-match") is None:
        return False
    family = subprocess.run(["fc-match", "-f", "%{family}", "Arial"], capture_output=True, text=True).stdout
    return "Arial" in family or "Liberation Sans" in family


ARIAL_METRICS = _arial_metric_font()
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--remote-debugging-port=0",
]

# Every visible ag-grid header and cell of the page: its column id, text, box, and
# whether some element inside it overflows (text cut by an ellipsis).
TABLE_JS = """(() => {
  // Elements showing text (not a screen-reader-only label: 1 px wide, clipped).
  const texts = el => [el, ...el.querySelectorAll('*')].filter(e => e.clientWidth > 1
      && getComputedStyle(e).visibility !== 'hidden'
      && [...e.childNodes].some(n => n.nodeType === 3 && n.textContent.trim()));
  const box = (el, kind) => { const r = el.getBoundingClientRect(), t = texts(el);
      return {kind, col: el.getAttribute('col-id'), text: el.innerText.trim(), left: r.left, right: r.right,
              top: r.top, bottom: r.bottom, text_px: Math.max(0, ...t.map(e => e.scrollWidth)),
              cut: t.some(e => e.scrollWidth > e.clientWidth + 1 || e.getBoundingClientRect().right > r.right + 1)}; };
  return JSON.stringify({width: window.innerWidth, height: window.innerHeight,
    headers: [...document.querySelectorAll('.ag-header-cell[col-id]')].map(e => box(e, 'header')),
    cells: [...document.querySelectorAll('.ag-cell[col-id]')].map(e => box(e, 'cell'))});
})()"""


class Chromium:
    """One headless browser with a fresh profile; `with Chromium(tmp) as b: b.open(url)`."""

    def __init__(self, profile: Path, width: int = 1600, height: int = 1000):
        self.profile, self.width, self.height = profile, width, height
        self.proc: subprocess.Popen | None = None
        self._ids = itertools.count(1)

    def __enter__(self) -> Chromium:
        import websocket  # websocket-client (the `test` extra)

        self.proc = subprocess.Popen(
            [
                CHROMIUM,
                *FLAGS,
                f"--user-data-dir={self.profile}",
                f"--window-size={self.width},{self.height}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        port = None
        for line in self.proc.stderr:  # "DevTools listening on ws://127.0.0.1:<port>/devtools/browser/..."
            match = re.search(r"DevTools listening on ws://[^:]+:(\d+)/", line)
            if match:
                port = int(match.group(1))
                break
        assert port is not None, "chromium printed no DevTools port"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as response:
            page = next(t for t in json.load(response) if t["type"] == "page")
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=60, suppress_origin=True)
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.ws.close()
        finally:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def call(self, method: str, **params) -> dict:
        ident = next(self._ids)
        self.ws.send(json.dumps({"id": ident, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == ident:
                assert "error" not in message, message
                return message["result"]

    def evaluate(self, expression: str):
        return self.call("Runtime.evaluate", expression=expression, returnByValue=True)["result"].get("value")

    def open(self, url: str) -> None:
        # The viewport is exactly width x height (a headless window's size includes no
        # browser frame, but be explicit: the acceptance is about a 1600 x 1000 screen).
        self.call(
            "Emulation.setDeviceMetricsOverride",
            width=self.width,
            height=self.height,
            deviceScaleFactor=1,
            mobile=False,
        )
        self.call("Page.navigate", url=url)

    def wait_for(self, expression: str, timeout_s: float = 90) -> bool:
        """True once `expression` is truthy in the page."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.evaluate(expression):
                return True
            time.sleep(0.5)
        return False

    def table(self) -> dict:
        """The runs table as laid out on screen (TABLE_JS)."""
        return json.loads(self.evaluate(TABLE_JS))

    def screenshot(self, path: Path) -> Path:
        path.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"]))
        return path
