"""A learner's browser tab without the browser: Streamlit's own websocket protocol, headless.

    tab = await Tab.open("http://localhost:8501")
    seen = await tab.visit("causal", "q_len=256&kv_len=256")   # a page by its URL path, and its query
    seen.wall_s, seen.ok, seen.exceptions, seen.error_boxes
    await tab.close()

What a browser does, minus the drawing: one websocket to /_stcore/stream for the tab's life, a
`rerun_script` BackMsg per page (the query string and the page's URL path, as the frontend sends
them), then ForwardMsgs until the run's `script_finished`. A visit's time runs from the request to
the end of the run as the server reports it, all elements received; what the page showed is read
from the deltas: exceptions (st.exception or an uncaught error), error boxes (st.error), warnings
(st.warning), and how many elements arrived. scripts/capacity.py --serve uses it to put a class on a real server.
Hand-written because Streamlit ships no client: AppTest runs the scripts in its own process, without the
server, and a real browser per learner (scripts/load_test.py) takes the cores the server needs; here a
class of 40 is 40 websockets in one Python process.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from urllib.parse import urlsplit

import websockets
from streamlit.proto.Alert_pb2 import Alert
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

DONE = {ForwardMsg.FINISHED_SUCCESSFULLY, ForwardMsg.FINISHED_WITH_COMPILE_ERROR}


@dataclasses.dataclass
class Seen:
    page: str
    wall_s: float
    elements: int = 0
    exceptions: list[str] = dataclasses.field(default_factory=list)
    error_boxes: list[str] = dataclasses.field(default_factory=list)
    warnings: list[str] = dataclasses.field(default_factory=list)
    infos: list[str] = dataclasses.field(default_factory=list)  # st.info boxes (a busy GPU says so in one)
    widgets: list[str] = dataclasses.field(default_factory=list)  # the ids of the widgets drawn (a key ends one)
    failure: str | None = None

    @property
    def ok(self) -> bool:
        return self.failure is None and not self.exceptions


class Tab:
    """One websocket session of a Streamlit server."""

    def __init__(self, ws):
        self.ws = ws

    @classmethod
    async def open(cls, url: str, timeout: float = 60.0, headers: dict[str, str] | None = None) -> Tab:
        """`headers`: what the browser sends with the websocket's upgrade (a load balancer's affinity cookie)."""
        parts = urlsplit(url)
        scheme = "wss" if parts.scheme == "https" else "ws"
        ws = await websockets.connect(f"{scheme}://{parts.netloc}{parts.path.rstrip('/')}/_stcore/stream",
                                      subprotocols=["streamlit"], max_size=None, open_timeout=timeout,
                                      additional_headers=headers,
                                      ping_interval=None, compression=None)
        return cls(ws)

    async def visit(self, page: str, query: str = "", timeout: float = 300.0, *, texts: dict[str, str] | None = None,
                    press: str | None = None) -> Seen:
        """Run `page` (its URL path; "" for the main page) with `query`; what came back. `texts` (widget id: value)
        and `press` (a button's widget id) are what a browser sends after typing into text boxes and a click."""
        msg = BackMsg()
        msg.rerun_script.query_string = query
        msg.rerun_script.page_name = page
        for wid, value in (texts or {}).items():
            msg.rerun_script.widget_states.widgets.add(id=wid, string_value=value)
        if press:
            msg.rerun_script.widget_states.widgets.add(id=press, trigger_value=True)
        start = time.perf_counter()
        seen = Seen(page or "entry", 0.0)
        await self.ws.send(msg.SerializeToString())
        try:
            async with asyncio.timeout(timeout):
                while True:
                    fm = ForwardMsg.FromString(await self.ws.recv())
                    kind = fm.WhichOneof("type")
                    if kind == "delta":
                        self._read(fm.delta, seen)
                    elif kind == "page_not_found":
                        seen.failure = f"page not found: {page!r}"
                    elif kind == "script_finished" and fm.script_finished in DONE:
                        if fm.script_finished == ForwardMsg.FINISHED_WITH_COMPILE_ERROR:
                            seen.failure = "the script did not compile"
                        break
        except TimeoutError:
            seen.failure = f"no end of run after {timeout:.0f} s"
        except websockets.ConnectionClosed as e:
            seen.failure = f"connection closed: {e}"
        seen.wall_s = time.perf_counter() - start
        if seen.failure is None and not seen.elements:
            seen.failure = "the page came back empty"
        return seen

    @staticmethod
    def _read(delta, seen: Seen) -> None:
        if delta.WhichOneof("type") != "new_element":
            return
        seen.elements += 1
        el = delta.new_element
        which = el.WhichOneof("type")
        wid = getattr(getattr(el, which, None), "id", "") if which else ""
        if isinstance(wid, str) and wid:
            seen.widgets.append(wid)
        if which == "exception":
            seen.exceptions.append(f"{el.exception.type}: {el.exception.message}")
        elif which == "alert" and el.alert.format == Alert.ERROR:
            seen.error_boxes.append(el.alert.body)
        elif which == "alert" and el.alert.format == Alert.WARNING:
            seen.warnings.append(el.alert.body)
        elif which == "alert" and el.alert.format == Alert.INFO:
            seen.infos.append(el.alert.body)

    async def close(self) -> None:
        await self.ws.close()


def run(coro):
    """asyncio.run(coro) in a thread of its own: works where an event loop already runs in this
    thread (beside Playwright's sync API, in a test)."""
    out: dict = {}

    def target() -> None:
        try:
            out["value"] = asyncio.run(coro)
        except BaseException as e:  # handed to the caller
            out["error"] = e

    t = threading.Thread(target=target, name="st-client")
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]
    return out["value"]
