#!/usr/bin/env python
"""Screenshots of every Your turn exercise with a right, a wrong and a hostile answer (for a person to look at).

    python scripts/yourturn_shots.py [--out artifacts/screenshots/yourturn]

Starts `python serve.py` (the device worker in its child process, as `make run`), opens each exercise's page in
Debian's Chromium, writes each answer into the box, presses Check and shoots the section.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from browser_util import VIEWPORT, StreamlitServer, launch_kwargs, open_page, rerun_after  # noqa: E402
from playwright.sync_api import sync_playwright  # noqa: E402

from attnlab.yourturn import exercises  # noqa: E402
from tests.yourturn_cases import MISTAKES  # noqa: E402

PAGES = {"pages/p4_naive_vs_fused.py": ("naive-vs-fused", "4 · Naive vs fused", ""),
         "pages/p6_causal.py": ("causal", "6 · Causal masking", ""),
         "pages/p8_mha_gqa_mqa.py": ("mha-gqa-mqa", "8 · MHA, GQA, MQA", ""),
         "pages/p5b_fused_kernel.py": ("fused-kernel", "5b · Inside the fused kernel", "")}
HOSTILE = "def {entry}(*args):\n    return ().__class__.__bases__[0].__subclasses__()\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "artifacts" / "screenshots" / "yourturn")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    with StreamlitServer(env={"ATTNLAB_WARM": "0"}) as srv, sync_playwright() as p:
        browser = p.chromium.launch(**launch_kwargs())
        page = browser.new_context(viewport=VIEWPORT).new_page()
        for name, ex in exercises.EXERCISES.items():
            path, title, query = PAGES[ex.page]
            wrong = next(c for (e, _), c in MISTAKES.items() if e == name)
            for kind, code in (("right", ex.solution), ("wrong", wrong), ("hostile", HOSTILE.format(entry=ex.entry))):
                open_page(page, srv.url, path, title, query)
                section = page.get_by_text(f"Your turn: {ex.title}", exact=False).first
                section.scroll_into_view_if_needed()
                box = page.get_by_label(f"Your `{ex.entry}`", exact=False).first
                rerun_after(page, lambda c=code, b=box: (b.fill(c), b.press("Control+Enter")))
                check = page.locator(f".st-key-yt_{name}_check button").first
                rerun_after(page, lambda c=check: c.click())
                area = page.locator(f".st-key-yt_{name}_code").first
                area.evaluate("e => e.scrollIntoView({block: 'start'})")  # the box at the top, the verdict below it
                page.wait_for_timeout(300)
                page.screenshot(path=str(a.out / f"{name}_{kind}.png"), full_page=False)
                print("shot", name, kind, flush=True)
        browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
