"""pytest plugin: kazoo's own suite with its test paths in a regional keyspace.

Loaded by kazoo_suite.py (pytest -p meridian_keyspace) when
MERIDIAN_KEYSPACE=/kazootests. kazoo's harness gives every test the chroot
"/kazootests" + a random hex; here that becomes "/kazootests/" + the hex,
and every cluster the harness starts gets the keyspace /kazootests (home
region "local", zone survival: a zoo.cfg member N is in zone zN), created
through `meridian keyspace create` before any test runs. So every path a
chrooted kazoo client touches lives in the keyspace's raft group, and what
the tests reach outside their chroot (the tests that use an unchrooted
client, /zookeeper) stays in the root group.
"""

import os
import subprocess
import time
import uuid

from kazoo.testing import common, harness

PREFIX = os.environ.get("MERIDIAN_KEYSPACE", "")
if PREFIX != "/kazootests":
    raise RuntimeError("meridian_keyspace: MERIDIAN_KEYSPACE must be /kazootests (kazoo's chroot prefix), not %r" % PREFIX)


class _NestedUUID:
    """uuid for kazoo.testing.harness: the chroot's hex one level deeper."""

    class _U:
        def __init__(self):
            self.hex = "/" + uuid.uuid4().hex

    @classmethod
    def uuid4(cls):
        return cls._U()


harness.uuid = _NestedUUID

_start = common.ZookeeperCluster.start


def _create_keyspace(cluster):
    eps = ",".join("localhost:%d" % s.server_info.election_port for s in cluster)
    # The admin: kazoo's harness sets ZooKeeper's super digest for "super:test".
    cmd = [os.environ["MERIDIAN_BIN"], "--endpoints", eps, "--insecure", "--timeout", "5s", "--user", "super:test",
           "keyspace", "create", PREFIX, "--home", "local", "--survive", "zone"]
    deadline = time.time() + 60
    while True:
        out = subprocess.run(cmd, capture_output=True, text=True)
        text = out.stdout + out.stderr
        if out.returncode == 0 or "keyspace already exists" in text:
            return
        if time.time() > deadline:
            raise RuntimeError("meridian_keyspace: %s: %s" % (" ".join(cmd), text))
        time.sleep(0.5)


def _start_with_keyspace(self):
    _start(self)
    _create_keyspace(self)


common.ZookeeperCluster.start = _start_with_keyspace

_setup = harness.KazooTestHarness.setup_zookeeper


def _setup_in_keyspace(self, **client_options):
    _setup(self, **client_options)
    if (PREFIX + "/") not in self.hosts:
        raise RuntimeError("meridian_keyspace: the test's chroot is not in the keyspace: " + self.hosts)


harness.KazooTestHarness.setup_zookeeper = _setup_in_keyspace
