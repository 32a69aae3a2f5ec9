#!/usr/bin/env bash
# What the hosted-class rehearsal (scripts/rehearse.py) needs on the H200 machine beyond Ray's wheel
# (../shared/ray-on-h200/) and the app's wheels (scripts/gpu_wheels.sh, tokamax's): that machine has no network,
# no kubectl and no HAProxy. Into the git-ignored .ray/class/ (about 25 MB):
#   wheels/         ray[default,client]'s dependencies the GPU image lacks (the dashboard agent serves KubeRay's
#                   /api/healthz only with them; without them `ray start` runs the agent --minimal)
#   haproxy/        Debian's HAProxy binary with the shared libraries it links beyond glibc and libstdc++
#   rendered.yaml   deploy/k8s-campus rendered by kustomize here (rehearse.py --rendered)
#   install.sh      on the GPU machine: wheels into /tmp/site-ray, haproxy onto PATH (/tmp/site-ray/bin)
#
#   bash scripts/gpu_class_kit.sh      # here, after ../shared/ray-on-h200/prepare.sh and `make .venv/.installed`
# On the GPU machine, after Ray's install.sh: `bash .ray/class/install.sh`. The pieces fit one 64 MiB transfer each
# beside Ray's parts: .ray/class/haproxy with .ray/part00 (then `mkdir -p /tmp/haproxy && cp -r .ray/class/haproxy/* /tmp/haproxy/`),
# .ray/class/{wheels,install.sh,rendered.yaml} with .ray/part01.
set -euo pipefail
cd "$(dirname "$0")/.."
RAY_VERSION=${RAY_VERSION:-2.60.0}
K=.ray/class
rm -rf "$K/wheels" /tmp/ray-class-dl  # afresh: a re-run that resolves a newer wheel left the old beside it (two google-auth: pip refused both)
mkdir -p "$K/wheels" "$K/haproxy/lib" /tmp/ray-class-dl
grep -qx '/.ray/' .git/info/exclude 2>/dev/null || echo '/.ray/' >> "$(git rev-parse --git-path info/exclude)"

# 1. Ray's extras: resolve ray[default,client] for CPython 3.12 manylinux, keep what the GPU image does not hold
python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 --abi abi3 \
  --abi none --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d /tmp/ray-class-dl "ray[default,client]==${RAY_VERSION}" 2>&1 | grep -v "is ignored" || true
python3 - "$K/wheels" <<'EOF'
import re, shutil, sys
from pathlib import Path
kinds = Path("/work/.library/device/KINDS.md")
m = re.search(r"Python packages already there.*?Packages: (.*?)\.\s*$", kinds.read_text(), re.S | re.M) if kinds.is_file() else None
present = {n.strip().lower().replace("_", "-") for n in m.group(1).split(",")} if m else set()
# Ray itself and jsonschema's family travel with ../shared/ray-on-h200/
present |= {"ray", "jsonschema", "jsonschema-specifications", "referencing", "rpds-py"}
out = Path(sys.argv[1])
for w in sorted(Path("/tmp/ray-class-dl").glob("*.whl")):
    if w.name.split("-")[0].lower().replace("_", "-") not in present:
        shutil.copy(w, out / w.name)
print("ray extras:", ", ".join(sorted(p.name.split("-")[0] for p in out.glob("*.whl"))))
EOF

# 2. HAProxy: the binary and every library it links that is not glibc's or the compiler's
H=$(command -v haproxy || echo /usr/sbin/haproxy)
[ -x "$H" ] || bash scripts/install_debian_tools.sh
cp "$H" "$K/haproxy/haproxy.bin"
ldd "$H" | awk '/=> \//{print $3}' | grep -v -E '/(libc|libm|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so' \
  | while read -r lib; do cp -L "$lib" "$K/haproxy/lib/"; done

# 3. The manifests, rendered here (kubectl comes with the venv's tools: make .venv/.installed)
KUBECTL=$(command -v kubectl || echo .venv/bin/kubectl)
"$KUBECTL" kustomize deploy/k8s-campus > "$K/rendered.yaml"

cat > "$K/install.sh" <<'SH'
#!/usr/bin/env bash
# On the GPU machine, after ../shared/ray-on-h200's install.sh: Ray's extras into /tmp/site-ray, haproxy onto PATH.
set -euo pipefail
HERE="$(cd "$(dirname "$(readlink -f "$0")")" && pwd)"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-ray "$HERE"/wheels/*.whl
mkdir -p /tmp/site-ray/bin /tmp/haproxy
[ -d "$HERE/haproxy" ] && cp -r "$HERE"/haproxy/* /tmp/haproxy/  # or carried in an earlier call, copied there then
printf '#!/bin/sh\nLD_LIBRARY_PATH=/tmp/haproxy/lib exec /tmp/haproxy/haproxy.bin "$@"\n' > /tmp/site-ray/bin/haproxy
chmod +x /tmp/site-ray/bin/haproxy /tmp/haproxy/haproxy.bin
/tmp/site-ray/bin/haproxy -v | head -1
PYTHONPATH=/tmp/site-ray python3 -c 'import ray, aiohttp_cors, opencensus, colorful; print("ray[default]", ray.__version__, "OK")'
SH
chmod +x "$K/install.sh"
du -sh "$K" "$K"/*
