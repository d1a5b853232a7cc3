#!/usr/bin/env bash
# The sandbox's kernel walls need bubblewrap (namespaces) and libseccomp (seccomp filters) from the OS.
# Installs them where they are missing and this user can (root with apt-get); otherwise says what to install.
# Without them, untrusted environment code is refused (see README "Sandbox"; GUST_SANDBOX_ALLOW_WEAK=1 opts out).
set -uo pipefail
missing=()
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
python3 -c 'import ctypes.util, sys; sys.exit(0 if ctypes.util.find_library("seccomp") else 1)' 2>/dev/null || missing+=(libseccomp2)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing the sandbox's walls: ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null 2>&1 \
    || { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null 2>&1; } \
    || echo "warning: could not install ${missing[*]}; the sandbox will refuse untrusted code (README: Sandbox)" >&2
else
  echo "warning: the sandbox needs ${missing[*]} (e.g. sudo apt-get install ${missing[*]}); without them untrusted code is refused (README: Sandbox)" >&2
fi
exit 0
