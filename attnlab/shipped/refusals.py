"""One memory rule for every shipped refusal: today's estimate against today's budget, on the GPU of the file.

Each shipped file was made by the lab's version of its day, whose refusals named that run's own cap
("over the cap of 52.43 GiB", "52.05", "51.68", "over this lab's budget of 83.68 GiB") and that version's
estimate (naive 129 GiB beside XLA's 193 GiB for the same scores). The cells were not measured either
way. On load, each such refusal is written again with the rule the lab applies now (attnlab/admission.py):
the estimate `runs.memory_needed` makes today, against 80 % of the memory JAX may use on that GPU (its
allocator's limit, in the file's environment), with the GPU's memory as its datasheet states it. A cell
today's rule would admit says so: it was refused by an older rule and is waiting to be measured.
"""

from __future__ import annotations

import re

from attnlab.shapes import AttentionShape, format_bytes

BUDGET_SHARE = 0.8  # budget.Budget.here: 80 % of the GPU's memory free when the device worker starts
OLD = re.compile(r"over (the cap|this lab's budget) of [\d.]+ GiB")
FIELDS = ("batch", "q_len", "kv_len", "heads", "kv_heads", "head_dim", "dtype", "causal")


def budget(environment: dict) -> tuple[int, str] | None:
    """(budget bytes, the rule in words) for the GPU of a shipped file, or None without its memory."""
    from attnlab import device

    limit = environment.get("memory_total_bytes")
    if not limit:
        return None
    peak = device.peak_for(environment.get("device", ""))
    gpu = environment.get("device", "the GPU").replace("NVIDIA ", "")
    has = f" of the {gpu}'s {peak.memory_gb:g} GB" if peak and peak.memory_gb else f" of the {gpu}"
    cap = int(limit * BUDGET_SHARE)
    return cap, (f"the lab's budget on the {gpu} of that run, {format_bytes(cap)}: {BUDGET_SHARE * 100:.0f} % of the "
                 f"{format_bytes(limit)} JAX's allocator may use{has}")


def relabel(result: dict) -> dict:
    """`result` (a shipped file, as loaded) with every refusal's reason and status written by today's rule."""
    from attnlab.measure import runs

    rule = budget(result.get("environment") or {})
    if rule is None:
        return result
    cap, words = rule

    def fix(row: dict) -> None:
        if not OLD.search(str(row.get("reason") or "")) or not all(k in row for k in FIELDS):
            return
        shape = AttentionShape(**{k: row[k] for k in FIELDS})
        need, _ = runs.memory_needed(shape, [row["implementation"]], accuracy=False,
                                     backward=row.get("pass") == "forward+backward")
        if need > cap:
            row["status"], row["reason"] = runs.OVER_BUDGET, (
                f"needs about {format_bytes(need)} of GPU memory (today's estimate), over {words}")
        else:
            row["reason"] = (f"not measured: refused by an older budget rule; today's estimate, {format_bytes(need)}, "
                             f"fits {words}")

    def walk(x) -> None:
        if isinstance(x, dict):
            if "reason" in x:
                fix(x)
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(result)
    return result
