"""AttnLab: scaled dot-product attention on GPUs, with JAX. `streamlit run app.py`

The entry point lists the lab's pages in order and renders the shared sidebar (the shape, kept
in the URL, and the device). Each page is a thin script in pages/ over the `attnlab` package.
"""

import gc
import threading
from pathlib import Path

import jax
import streamlit as st

from attnlab import service
from attnlab.settings import settings
from attnlab.studies import warm
from pages import activity, guide, opening, sidebar, workers

st.set_page_config(page_title="AttnLab", page_icon="🔦", layout="wide")
# A backend that cannot run a shape raises while tracing (its words become the "why not" column).
# JAX then filters the traceback, testing every frame of the deep server stack against its own
# paths with os.path.samefile: tens of seconds of CPU per class. Learners see one line, never it.
jax.config.update("jax_traceback_filtering", "off")

def make_pages() -> dict:
    """The lab's st.Page objects: its pages in order, the first page's aliases and the instructor's page.

    Made once per browser session and kept in it (`session_pages`), not at every run: an st.Page of a file
    resolves the file on the disk, and with 20 learners on one UI process on the H200 that was 5 % of the page
    threads' samples. Never shared between sessions: st.navigation marks the page it returns as callable and
    Page.run clears the mark, on the object itself."""
    pages = [
        # the default page is served at /, never at its own url_path: /formula and friends are aliases of it
        st.Page("pages/p1_attention.py", title="1 · How attention works", icon="🧮", url_path="how-attention-works",
                default=True),
        st.Page("pages/p2_gpu_check.py", title="2 · GPU check", icon="🖥️", url_path="gpu-check"),
        st.Page("pages/p3_qkv.py", title="3 · Q, K, V", icon="📐", url_path="qkv"),
        st.Page("pages/p4_naive_vs_fused.py", title="4 · Naive vs fused", icon="⚖️", url_path="naive-vs-fused"),
        st.Page("pages/p5_cudnn.py", title="5 · cuDNN", icon="⚡", url_path="cudnn"),
        st.Page("pages/p5b_fused_kernel.py", title="5b · Inside the fused kernel", icon="🔬", url_path="fused-kernel"),
        st.Page("pages/p6_causal.py", title="6 · Causal masking", icon="🔺", url_path="causal"),
        st.Page("pages/p7_benchmarks.py", title="7 · Benchmarks", icon="⏱️", url_path="benchmarks"),
        st.Page("pages/p8_mha_gqa_mqa.py", title="8 · MHA, GQA, MQA", icon="🧩", url_path="mha-gqa-mqa"),
        st.Page("pages/p9_te_fp8.py", title="9 · TransformerEngine & FP8", icon="🚀", url_path="te-fp8"),
        st.Page("pages/p10_across_gpus.py", title="10 · Across GPUs", icon="🔗", url_path="across-gpus"),
    ]

    def first_page() -> None:
        """/formula, /attention and /home: the first page is served at the root URL, so these links lead there."""
        st.switch_page(pages[0])

    aliases = [st.Page(first_page, title="1 · How attention works", url_path=path, visibility="hidden")
               for path in ("formula", "attention", "home")]
    return {"pages": pages, "aliases": aliases,
            "instructor": st.Page("pages/p12_instructor.py", title="Instructor", icon="🧑‍🏫", url_path="instructor")}


def session_pages() -> dict:
    """This browser session's pages (`make_pages`), made on its first run."""
    if "attnlab_pages" not in st.session_state:
        st.session_state["attnlab_pages"] = make_pages()
    return st.session_state["attnlab_pages"]


def page_file(page) -> str:
    """The running page's file as app.py names it ("pages/p4_....py"), or "" (Streamlit keeps it as `_page`; a test
    of the footers, tests/pages/test_guide.py, fails if that changes)."""
    source = getattr(page, "_page", None)
    return f"pages/{Path(source).name}" if isinstance(source, (str, Path)) else ""


def instructor(page) -> list:
    """The instructor's page, for a browser that opened a link with the instructor's token (ATTNLAB_INSTRUCTOR_TOKEN)."""
    token = settings().instructor_token
    if token and st.query_params.get("instructor") == token:
        st.session_state["instructor"] = True
        del st.query_params["instructor"]  # not in the address bar, nor in a link copied from it
    return [page] if token and st.session_state.get("instructor") else []


def freeze_long_lived() -> None:
    """Hide every object alive now from the garbage collector's full collections (gc.freeze).

    Streamlit collects garbage after every script run (runner.postScriptGC), and a full collection
    walks every tracked object: with JAX, Altair's schema classes and pandas loaded that is about
    200,000 objects and 0.15-0.3 s of CPU, holding the GIL, per page load. Imported modules and
    compiled programs live as long as the process, so they are moved out of its sight; what the
    pages create afterwards is still collected after each run."""
    gc.collect()
    gc.freeze()


@st.cache_resource(show_spinner=False)
def freeze_once() -> None:
    """Once per server process, after the first run has imported the app."""
    freeze_long_lived()


def _warm(url: str, paths: list[str]) -> None:
    def visit(pause, log) -> None:  # the instructor's class shapes, every page opened here as a learner's tab would
        opening.visit_class_shapes(url, paths, pause=pause, log=log)

    def warm_up() -> None:
        try:  # a shape at a time, each to the worker that owns it, only while no learner's page runs here
            opening.warm_up(call=service.call, log=lambda line: print(line, flush=True), visit=visit)
        except Exception as e:  # only a warm-up: the pages compute what they need themselves
            print(f"{warm.STOPPED}: {type(e).__name__}: {e}", flush=True)

    def answering() -> set[tuple[str, int]]:
        try:
            return {(w.name, w.pid) for w in service.workers()}
        except Exception:  # Ray out of reach: no worker answers
            return set()

    # and again for each device worker this process has not warmed, after REWARM_QUIET_S with no page run here
    opening.keep_warm(warm_up, answering, lambda: activity.wait_for_quiet(REWARM_QUIET_S),
                      log=lambda line: print(line, flush=True))


REWARM_QUIET_S = 60.0  # before warming a new device worker: a minute with no learner's page on this server


@st.cache_resource(show_spinner=False)
def warm_once(paths: tuple[str, ...]) -> threading.Thread:
    """Once per server process: the device worker compiles the codelab's shape for every backend, and the class's
    shapes are opened on every page of `paths` (opening.warm_up); then again for each device worker that answers
    later and was not warmed (opening.keep_warm)."""
    url = f"http://127.0.0.1:{st.get_option('server.port')}/{st.get_option('server.baseUrlPath').strip('/')}"
    t = threading.Thread(target=_warm, args=(url, list(paths)), name="attnlab-warm", daemon=True)
    t.start()
    return t


nav = session_pages()
by_file = {page_file(p): p for p in nav["pages"]}  # the guide's links, by object (pages/guide.py says why)
page = st.navigation(nav["pages"] + nav["aliases"] + instructor(nav["instructor"]))
st.sidebar.title("🔦 AttnLab")
with activity.page_running():
    try:
        workers.look_again()  # whether a worker answers is asked anew each run (once: pages/workers.py says why)
        sidebar.device_badge()
        st.session_state["shape"] = sidebar.shape_sidebar()
        with st.sidebar.expander("📓 The codelab, step by step"):
            guide.codelab_path(by_file)
        with st.sidebar.expander("📖 Glossary"):
            guide.glossary()
        page.run()
        guide.step_footer(page_file(page), by_file)
    except service.WorkerLost as e:  # the device worker died or is starting: a message, and the app serves on
        st.warning(str(e))
        st.button("Try again", key="worker_lost_again", help="Runs this page again: its device work is asked anew.")
freeze_once()
if settings().warm:
    warm_once(tuple(p.url_path for p in nav["pages"]))  # after the first page has rendered: nobody waits for it
