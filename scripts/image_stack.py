"""This machine's accelerator stack beside the image's lock: what requirements-image.lock pins, what is installed.

    python3 scripts/image_stack.py                      # a table: package, locked, installed, equal?
    python3 scripts/image_stack.py --json stack.json    # the same rows as JSON, too
    python3 scripts/image_stack.py --wheels DIR [--glibc 2.35]  # `pip download` commands for the other packages

Rule: one row for every accelerator package the lock pins or this Python has installed (JAX, jaxlib, its CUDA 13
plugin and PJRT, the nvidia-* libraries, TransformerEngine, NumPy, ml_dtypes, SciPy), and the exit status is
always 0: it reports, the GPU tests judge. Why: the image's stack counts as tested on the H200 machine only
where that machine runs the same versions; the rows say where it does not. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from importlib import metadata
from pathlib import Path

LOCK = Path(__file__).resolve().parents[1] / "requirements-image.lock"
ACCELERATOR = re.compile(
    r"^(jax|jaxlib|jax-cuda\d+-(plugin|pjrt)|nvidia-.+|transformer-engine(-.+)?|numpy|ml-dtypes|scipy)$")


def pip_download(glibc: str) -> str:
    """pip's download for CPython 3.12 on Linux x86_64 with this glibc or older (pure-Python wheels fit any)."""
    newest = int(glibc.split(".")[1])
    tags = [f"manylinux_2_{minor}_x86_64" for minor in range(newest, 4, -1)]
    tags += ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]
    return ("python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "
            + " ".join(f"--platform {tag}" for tag in tags))


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def locked_pins(lock: Path) -> dict[str, str]:
    """name -> version for every `name==version` line of a uv lock (hashes and comments skipped)."""
    pins = {}
    for line in lock.read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==([^\s;\\]+)", line)
        if match:
            pins[normalise(match.group(1))] = match.group(3)
    return pins


def installed_versions() -> dict[str, str]:
    found = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            found.setdefault(normalise(name), dist.version)
    return found


def rows(lock: Path) -> list[dict]:
    """One row per accelerator package in the lock or installed here, sorted by name."""
    pins, here = locked_pins(lock), installed_versions()
    names = sorted(n for n in set(pins) | set(here) if ACCELERATOR.match(n))
    return [{"package": n, "locked": pins.get(n), "installed": here.get(n),
             "equal": pins.get(n) is not None and pins.get(n) == here.get(n)} for n in names]


def table(found: list[dict]) -> str:
    width = max([len("package")] + [len(r["package"]) for r in found])
    lines = [f"{'package':<{width}}  {'locked':<16}  {'installed':<16}  equal"]
    for r in found:
        lines.append(f"{r['package']:<{width}}  {r['locked'] or '-':<16}  {r['installed'] or '-':<16}  "
                     f"{'yes' if r['equal'] else 'NO'}")
    same = sum(r["equal"] for r in found)
    lines.append(f"{same} of {len(found)} equal (python {sys.version.split()[0]})")
    return "\n".join(lines)


def wheel_commands(lock: Path, folder: str, glibc: str = "2.35") -> list[str]:
    """A `pip download` command for each locked package outside the accelerator stack."""
    download = pip_download(glibc)
    return [f"{download} -d {folder} {name}=={version}"
            for name, version in sorted(locked_pins(lock).items()) if not ACCELERATOR.match(name)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lock", type=Path, default=LOCK, help="the image's lock (default: %(default)s)")
    parser.add_argument("--json", metavar="PATH", help="write the rows as JSON here as well")
    parser.add_argument("--wheels", metavar="DIR", help="print pip download commands for the other packages")
    parser.add_argument("--glibc", default="2.35", help="--wheels: the target's glibc (`ldd --version`; %(default)s)")
    args = parser.parse_args(argv)
    if args.wheels:
        print("\n".join(wheel_commands(args.lock, args.wheels, args.glibc)))
        return 0
    found = rows(args.lock)
    print(table(found))
    if args.json:
        Path(args.json).write_text(json.dumps({"python": sys.version.split()[0], "lock": str(args.lock),
                                               "rows": found}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
