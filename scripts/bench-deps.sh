#!/usr/bin/env bash
# Installs the peers the side-by-side benchmarks run (bench/): ZooKeeper,
# etcd and Redis from Debian packages, pinned to the versions the published
# figures were measured with. Idempotent. The benchmarks start their own
# processes in temp dirs, so the system services the packages enable are
# stopped and disabled here: a stray service would hold the default ports and
# take CPU from the measured processes.
set -euo pipefail

pins=(
  "zookeeper=3.8.0-11+deb12u2"
  "etcd-server=3.4.23-4+b4"
  "redis-server=5:7.0.15-1~deb12u10"
)

if [ "$(id -u)" -ne 0 ]; then
  echo "bench-deps: needs root (apt-get install)" >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
missing=()
for p in "${pins[@]}"; do
  name=${p%%=*}
  want=${p#*=}
  have=$(dpkg-query -W -f='${Status} ${Version}' "$name" 2>/dev/null || true)
  if [ "$have" != "install ok installed $want" ]; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -gt 0 ]; then
  apt-get update -qq
  # policy-rc.d 101 keeps the packages' postinst from starting services.
  prc=/usr/sbin/policy-rc.d
  had_prc=0
  [ -e "$prc" ] && had_prc=1
  if [ $had_prc -eq 0 ]; then
    printf '#!/bin/sh\nexit 101\n' >"$prc"
    chmod +x "$prc"
  fi
  for p in "${missing[@]}"; do
    name=${p%%=*}
    if apt-cache madison "$name" | awk '{print $3}' | grep -qxF "${p#*=}"; then
      apt-get install -y -qq --no-install-recommends "$p"
    else
      echo "bench-deps: WARNING: pinned $p is gone from the archive; installing the current $name (record its version in the report)" >&2
      apt-get install -y -qq --no-install-recommends "$name"
    fi
  done
  [ $had_prc -eq 0 ] && rm -f "$prc"
fi

# Whatever started them (an earlier install without policy-rc.d, a reboot):
# stop and disable the system services; ignore their absence.
for svc in redis-server zookeeper etcd; do
  if command -v systemctl >/dev/null 2>&1 && systemctl list-unit-files "$svc.service" >/dev/null 2>&1; then
    systemctl disable --now "$svc" >/dev/null 2>&1 || true
  fi
  if [ -x "/etc/init.d/$svc" ]; then
    "/etc/init.d/$svc" stop >/dev/null 2>&1 || true
  fi
  update-rc.d "$svc" disable >/dev/null 2>&1 || true
done
# Without systemd (containers) the init scripts may not find a daemon they did
# not start; kill only the packaged daemons by their pid files.
for pidf in /run/redis/redis-server.pid /var/run/zookeeper/zookeeper.pid; do
  if [ -f "$pidf" ]; then
    kill "$(cat "$pidf")" 2>/dev/null || true
    rm -f "$pidf"
  fi
done

for p in "${pins[@]}"; do
  name=${p%%=*}
  echo "bench-deps: $name $(dpkg-query -W -f='${Version}' "$name")"
done
