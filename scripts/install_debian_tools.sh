#!/usr/bin/env bash
# Debian's packages the tests use: Chromium (Playwright's browser tests: Playwright cannot download its own
# browser here) and HAProxy (the rehearsal's proxy, scripts/rehearse.py). Installs only what is missing.
set -e
missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ] || missing+=(haproxy)
[ ${#missing[@]} -eq 0 ] && exit 0
SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
echo "installed: ${missing[*]}"
