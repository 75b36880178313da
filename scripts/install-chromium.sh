#!/usr/bin/env bash
# Installs Debian's chromium package (pinned) for the dashboard's browser
# test, which loads each view in headless Chromium. Idempotent; starts
# nothing. Needs root and apt (Debian 12). Prints the chromium path.
#
# Debian's security archive keeps only the newest chromium: once the
# pinned version is gone from it, the version apt offers is installed
# instead, with a warning naming both (the test exercises the dashboard,
# not the browser; bump the pin then).
set -euo pipefail
CHROMIUM_DEB_VERSION=156.0.8078.108-1~deb12u1
bin=/usr/bin/chromium
if [ "$(dpkg-query -W -f='${Version}' chromium 2>/dev/null || true)" != "$CHROMIUM_DEB_VERSION" ] || [ ! -x "$bin" ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt_install() { apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends "chromium${1:+=$1}" >&2; }
  if ! apt_install "$CHROMIUM_DEB_VERSION"; then
    apt-get -o DPkg::Lock::Timeout=300 update -q >&2
    if ! apt_install "$CHROMIUM_DEB_VERSION"; then
      offered=$(apt-cache policy chromium | awk '/Candidate:/ {print $2}')
      echo "install-chromium: chromium $CHROMIUM_DEB_VERSION is no longer offered; installing $offered" >&2
      apt_install "$offered"
    fi
  fi
fi
echo "$bin"
