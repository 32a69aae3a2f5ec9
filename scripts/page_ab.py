"""Before/after for a change to the pages: the same cached page in a learner's new tab, on two checkouts at once.

    git worktree add /tmp/before <commit>
    .venv/bin/python scripts/page_ab.py /tmp/before [--after .] [--reps 5] [--pages causal,qkv]

A benchmark, not a test. page_speed.py's figures move by a third from one hour to the next on a
shared two-core machine (its sweeps took 5.8 s one day and 10 s the next, code unchanged), so two
of its runs made at different times cannot show a change of a few tenths. Here both servers run
side by side (`python serve.py` from each checkout, warm-up off, every page loaded once), and each
round opens every page in a new tab of each checkout's warmed browser context, alternating which
goes first; the table gives each side's median. Both servers share the machine, so the absolute
figures are higher than page_speed.py's: read the difference.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import time
from pathlib import Path

from playwright.sync_api import sync_playwright


def browser_util(checkout: Path):
    """That checkout's tests/browser_util.py (its pages, its server command)."""
    spec = importlib.util.spec_from_file_location(f"browser_util_{abs(hash(str(checkout)))}",
                                                  checkout / "tests" / "browser_util.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("before", type=Path, help="a checkout of the code before the change")
    ap.add_argument("--after", type=Path, default=Path(__file__).resolve().parents[1], help="default: this checkout")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--pages", type=lambda v: v.split(","), help="url paths, commas (default: every page)")
    a = ap.parse_args()
    side = {"before": browser_util(a.before.resolve()), "after": browser_util(a.after.resolve())}
    pages = [(p, t) for p, t in side["after"].PAGES if not a.pages or p in a.pages]
    bu = side["after"]
    with (side["before"].StreamlitServer(env={"ATTNLAB_WARM": "0"}) as s0,
          side["after"].StreamlitServer(env={"ATTNLAB_WARM": "0"}) as s1, sync_playwright() as p):
        browser = p.chromium.launch(**bu.launch_kwargs())
        url = {"before": s0.url, "after": s1.url}
        ctx = {k: browser.new_context(viewport=bu.VIEWPORT) for k in url}
        for k in url:  # every page once: the server's caches and the browser's HTTP cache are warm
            warm = ctx[k].new_page()
            for path, title in side[k].PAGES:
                bu.open_page(warm, url[k], path, title)
            warm.close()
        times: dict[tuple[str, str], list[float]] = {}
        for rep in range(a.reps):
            for path, title in pages:
                for k in (("before", "after") if rep % 2 == 0 else ("after", "before")):
                    page = ctx[k].new_page()
                    t0 = time.monotonic()
                    page.goto(bu.page_url(url[k], path), wait_until="domcontentloaded")
                    page.locator(bu.TITLE).filter(has_text=title).first.wait_for()
                    bu.wait_idle(page)
                    times.setdefault((path, k), []).append(time.monotonic() - t0)
                    page.close()
        browser.close()
    print(f"cached page in a learner's new tab, median of {a.reps} (s)\n\n| page | before | after | change |\n|---|---:|---:|---:|")
    for path, title in pages:
        b, f = (statistics.median(times[(path, k)]) for k in ("before", "after"))
        print(f"| {title} | {b:.2f} | {f:.2f} | {f - b:+.2f} |")


if __name__ == "__main__":
    main()
