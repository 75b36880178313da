#!/usr/bin/env bash
# Installs Debian's zookeeper package (pinned) for its zkCli.sh, which the
# compatibility tests drive against Meridian. Idempotent; starts no service.
# Needs root and apt (Debian 12). Prints the zkCli.sh path.
set -euo pipefail
ZK_DEB_VERSION=3.8.0-11+deb12u2
cli=/usr/share/zookeeper/bin/zkCli.sh
if [ "$(dpkg-query -W -f='${Version}' zookeeper 2>/dev/null || true)" != "$ZK_DEB_VERSION" ] || [ ! -x "$cli" ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt_install() { apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends "zookeeper=$ZK_DEB_VERSION" >&2; }
  if ! apt_install; then
    apt-get -o DPkg::Lock::Timeout=300 update -q >&2
    apt_install
  fi
fi
echo "$cli"
