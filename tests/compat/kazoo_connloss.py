"""A write whose outcome the server cannot know, seen through kazoo.

Usage: kazoo_connloss.py LEADER_HOST:PORT FOLLOWER_PID FOLLOWER_PID

Connects kazoo to the leader only, stops both followers (SIGSTOP) so the
leader cannot commit, and writes: the write must fail with ConnectionLoss
(the server closes the connection, as ZooKeeper does), not with an error
code in a reply (kazoo would raise OperationTimeoutError for -7 or a
generic ZookeeperError for -4). Then it resumes the followers (SIGCONT) and
checks that kazoo reconnects with the same session, which still works.
Exits non-zero on the first failed check; prints KAZOO CONNLOSS OK at the
end.
"""
import os
import signal
import sys
import threading
import time

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import ConnectionLoss


def main(leader, pids):
    states = []
    connected = threading.Event()

    def listener(state):
        states.append(state)
        if state == KazooState.CONNECTED:
            connected.set()
        else:
            connected.clear()

    # Keep retrying the connection quickly and forever: the test decides
    # when the cluster is back.
    zk = KazooClient(hosts=leader, timeout=30,
                     connection_retry=dict(max_tries=-1, delay=0.1, backoff=1.5, max_delay=1))
    zk.add_listener(listener)
    zk.start(timeout=30)
    sid, _ = zk.client_id
    zk.create("/connloss/before", b"x", makepath=True)

    stopped = []
    try:
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
            stopped.append(pid)
        started = time.monotonic()
        try:
            zk.create("/connloss/lost", b"y")
            raise AssertionError("write without a quorum succeeded")
        except ConnectionLoss:
            pass
        took = time.monotonic() - started
        assert KazooState.SUSPENDED in states, states
        print("write without a quorum: ConnectionLoss after %.1fs" % took)
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)

    assert connected.wait(60), "kazoo did not reconnect: %r" % states
    assert KazooState.LOST not in states, "session lost: %r" % states
    assert zk.client_id[0] == sid, (hex(zk.client_id[0]), hex(sid))
    zk.create("/connloss/after", b"z")
    data, _ = zk.get("/connloss/before")
    assert data == b"x", data
    # The write whose outcome was unknown either applied or did not; the
    # application decides. Both are fine here: only reading it must work.
    zk.exists("/connloss/lost")
    zk.create("/connloss/eph", b"", ephemeral=True)
    zk.stop()
    zk.close()
    print("KAZOO CONNLOSS OK")


if __name__ == "__main__":
    main(sys.argv[1], [int(p) for p in sys.argv[2:]])
