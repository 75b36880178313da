#!/usr/bin/env bash
# Installs Debian's chromium package (pinned) for the dashboard's browser
# test, which loads each view in headless Chromium. Idempotent; starts
# nothing. Needs root and apt (Debian 12). Prints the chromium path.
set -euo pipefail
CHROMIUM_DEB_VERSION=156.0.8078.108-1~deb12u1
bin=/usr/bin/chromium
if [ "$(dpkg-query -W -f='${Version}' chromium 2>/dev/null || true)" != "$CHROMIUM_DEB_VERSION" ] || [ ! -x "$bin" ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt_install() { apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends "chromium=$CHROMIUM_DEB_VERSION" >&2; }
  if ! apt_install; then
    apt-get -o DPkg::Lock::Timeout=300 update -q >&2
    apt_install
  fi
fi
echo "$bin"
