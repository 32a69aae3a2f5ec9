"""Is this Python's accelerator stack the image's lock, file for file? Each locked wheel's RECORD against the disk.

    python scripts/wheel_records.py fetch .ray/image/records.json.gz      # here (PyPI): each wheel's RECORD
    python3 scripts/wheel_records.py verify .ray/image/records.json.gz    # on the GPU machine: its files against them

`fetch` finds, for every accelerator package of requirements-image.lock (scripts/image_stack.py's ACCELERATOR:
JAX, jaxlib, its CUDA 13 plugin and PJRT, the nvidia-* libraries, NumPy, ml_dtypes, SciPy, TransformerEngine), the
wheel for CPython 3.12 on Linux x86_64 whose sha256 the lock pins, and reads only its RECORD (the wheel's list of
files with each file's sha256) by HTTP range requests: a few hundred KiB instead of the ~3 GB of wheels, which the
GPU machine, with no network and 64 MiB a call, cannot be given. `verify` hashes every file those RECORDs name in
this Python's installed copy of the same package. Where all are equal, the GPU tests there ran the lock's own
libraries byte for byte, not only its versions (image_stack.py). Files an installer moves or rewrites (a wheel's
`.data/scripts`, `.data/data`, `.data/headers`) are counted apart and not compared. Standard library only.

Why not pip: `pip download` fetches whole wheels, and `pip hash` or `uv pip install --require-hashes` check an
archive, which an installed package no longer is; neither compares installed files with a wheel's RECORD.
"""

from __future__ import annotations

import argparse
import base64
import concurrent.futures
import gzip
import hashlib
import io
import json
import re
import sys
import urllib.request
import zipfile
from importlib import metadata
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from image_stack import ACCELERATOR, LOCK, locked_pins, normalise  # noqa: E402

INDEX = "https://pypi.org/simple"
MOVED = re.compile(r"^[^/]+\.data/(scripts|data|headers)/")  # where an installer puts these is its own choice
RELOCATED = re.compile(r"^[^/]+\.data/(purelib|platlib)/")  # installed at the top of site-packages


class RangeFile(io.RawIOBase):
    """A remote file read by HTTP range requests (what zipfile needs: seek, tell, read), a block at a time."""

    BLOCK = 1 << 16

    def __init__(self, url: str, opener=urllib.request.urlopen):
        self.url, self.opener, self.pos, self._blocks = url, opener, 0, {}
        with opener(urllib.request.Request(url, method="HEAD"), timeout=60) as r:
            self.size = int(r.headers["Content-Length"])

    def _block(self, i: int) -> bytes:
        if i not in self._blocks:
            end = min(self.size, (i + 1) * self.BLOCK) - 1
            req = urllib.request.Request(self.url, headers={"Range": f"bytes={i * self.BLOCK}-{end}"})
            with self.opener(req, timeout=120) as r:
                data = r.read()
            if len(data) != end - i * self.BLOCK + 1:
                raise OSError(f"{self.url}: the server ignored the range (got {len(data)} bytes)")
            self._blocks[i] = data
        return self._blocks[i]

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = {0: offset, 1: self.pos + offset, 2: self.size + offset}[whence]
        return self.pos

    def tell(self) -> int:
        return self.pos

    def read(self, n: int = -1) -> bytes:
        end = self.size if n is None or n < 0 else min(self.size, self.pos + n)
        if end <= self.pos:
            return b""
        first, last = self.pos // self.BLOCK, (end - 1) // self.BLOCK
        data = b"".join(self._block(i) for i in range(first, last + 1))
        start = self.pos - first * self.BLOCK
        out, self.pos = data[start:start + end - self.pos], end
        return out


def record_of(wheel) -> str:
    """The text of a wheel's `*.dist-info/RECORD` (`wheel`: a path or a seekable file)."""
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if re.fullmatch(r"[^/]+\.dist-info/RECORD", n))
        return z.read(name).decode()


def _hashes(lock_text: str) -> dict[str, set[str]]:
    """name -> the sha256 digests the lock pins for it."""
    out: dict[str, set[str]] = {}
    for block in re.split(r"\n(?=[A-Za-z0-9])", lock_text):
        m = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==", block)
        if m:
            out[normalise(m.group(1))] = set(re.findall(r"sha256:([0-9a-f]{64})", block))
    return out


def fits(filename: str) -> bool:
    """A wheel that installs on CPython 3.12, Linux x86_64 (the image's Python)."""
    if not filename.endswith(".whl"):
        return False
    py, abi, plat = filename[:-4].split("-")[-3:]
    return (any(t in ("py3", "cp312") for t in py.split(".")) and abi in ("none", "abi3", "cp312")
            and (plat == "any" or all("linux" in t and t.endswith("x86_64") for t in plat.split("."))))


def locked_wheel(name: str, digests: set[str], index: str = INDEX, opener=urllib.request.urlopen) -> dict | None:
    """The index's file (PEP 691's JSON) for `name` that the lock pins and the image's Python installs."""
    req = urllib.request.Request(f"{index}/{name}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with opener(req, timeout=60) as r:
        files = json.load(r)["files"]
    return next(({"wheel": f["filename"], "url": f["url"], "sha256": f["hashes"]["sha256"]} for f in files
                 if f["hashes"].get("sha256") in digests and fits(f["filename"])), None)


def fetch(lock: Path = LOCK, only: str | None = None, index: str = INDEX) -> dict:
    """{package: {version, wheel, sha256, record}} for the lock's accelerator packages, or those `only` (a regex)
    matches (wheels only: an sdist,
    TransformerEngine's JAX extension, is built where it runs and has no RECORD to compare)."""
    pins, digests = locked_pins(lock), _hashes(lock.read_text())
    names = [n for n in sorted(pins) if (re.search(only, n) if only else ACCELERATOR.match(n))]

    def one(name: str) -> tuple[str, dict | None]:
        found = locked_wheel(name, digests.get(name, set()), index)
        return name, found and {"version": pins[name], **found, "record": record_of(RangeFile(found["url"]))}

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        return {name: got for name, got in pool.map(one, names) if got}


def digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return "sha256=" + base64.urlsafe_b64encode(h.digest()).rstrip(b"=").decode()


def verify_one(name: str, entry: dict) -> dict:
    """One package: each file its wheel's RECORD hashes, hashed again where this Python installed it."""
    row = {"package": name, "locked": entry["version"], "installed": None, "files": 0, "equal": 0,
           "differ": [], "missing": [], "moved": 0}
    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return row
    row["installed"] = dist.version
    for line in entry["record"].splitlines():
        path, _, rest = line.partition(",")
        want = rest.rpartition(",")[0]
        if not want:  # RECORD itself, and any file listed without a hash
            continue
        if MOVED.match(path):
            row["moved"] += 1
            continue
        row["files"] += 1
        where = Path(dist.locate_file(RELOCATED.sub("", path)))
        if not where.is_file():
            row["missing"].append(path)
        elif digest(where) != want:
            row["differ"].append(path)
        else:
            row["equal"] += 1
    return row


def verify(records: dict) -> list[dict]:
    with concurrent.futures.ThreadPoolExecutor(8) as pool:  # hashlib lets go of the GIL: ~6 GB in seconds
        return list(pool.map(lambda kv: verify_one(*kv), sorted(records.items())))


def table(rows: list[dict]) -> str:
    width = max([len("package")] + [len(r["package"]) for r in rows])
    lines = [f"{'package':<{width}}  {'locked':<14} {'installed':<14} {'files':>6} {'equal':>6} differ missing moved"]
    for r in rows:
        lines.append(f"{r['package']:<{width}}  {r['locked']:<14} {r['installed'] or '-':<14} {r['files']:>6} "
                     f"{r['equal']:>6} {len(r['differ']):>6} {len(r['missing']):>7} {r['moved']:>5}"
                     + (f"  e.g. {(r['differ'] + r['missing'])[0]}" if r["differ"] or r["missing"] else ""))
    same = [r for r in rows if r["installed"] and r["files"] and r["equal"] == r["files"]]
    lines.append(f"{len(same)} of {len(rows)} locked wheels installed here file for file "
                 f"({sum(r['files'] for r in same)} files; python {sys.version.split()[0]})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    f = sub.add_parser("fetch", help="read the lock's wheels' RECORDs from the index (needs the network)")
    f.add_argument("out", type=Path)
    f.add_argument("--lock", type=Path, default=LOCK)
    f.add_argument("--only", help="a regex: the lock's packages it matches (default: the accelerator ones)")
    f.add_argument("--index", default=INDEX)
    v = sub.add_parser("verify", help="this Python's installed files against the RECORDs (exit 1 unless all equal)")
    v.add_argument("records", type=Path)
    v.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    if args.what == "fetch":
        records = fetch(args.lock, args.only, args.index)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_bytes(gzip.compress(json.dumps(records, sort_keys=True).encode()))
        print(f"{len(records)} RECORDs, {sum(len(r['record'].splitlines()) for r in records.values())} files, "
              f"into {args.out} ({args.out.stat().st_size // 1024} KiB)")
        return 0
    rows = verify(json.loads(gzip.decompress(args.records.read_bytes())))
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0 if rows and all(r["installed"] and r["equal"] == r["files"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
