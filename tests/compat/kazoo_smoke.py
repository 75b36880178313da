"""Drives a Meridian cluster with kazoo, an unmodified ZooKeeper client.

Usage: kazoo_smoke.py HOST:PORT[,HOST:PORT...]
Exits non-zero on the first failed check; prints KAZOO SMOKE OK at the end.
"""
import sys
import threading
import time

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NoNodeError, NodeExistsError, NotEmptyError
from kazoo.recipe.election import Election
from kazoo.recipe.lock import Lock


def main(hosts):
    zk = KazooClient(hosts=hosts, timeout=10)
    zk.start(timeout=15)

    zk.ensure_path("/kz/a/b")
    stat = zk.set("/kz/a/b", b"hello")
    data, stat = zk.get("/kz/a/b")
    assert data == b"hello" and stat.version == 1, (data, stat)
    try:
        zk.set("/kz/a/b", b"x", version=0)
        raise AssertionError("stale version accepted")
    except BadVersionError:
        pass
    try:
        zk.create("/kz/a")
        raise AssertionError("duplicate create accepted")
    except NodeExistsError:
        pass
    try:
        zk.delete("/kz/a")
        raise AssertionError("non-empty delete accepted")
    except NotEmptyError:
        pass
    try:
        zk.get("/kz/missing")
        raise AssertionError("missing node read")
    except NoNodeError:
        pass

    # Watches: data and children, fired once per change.
    seen = threading.Event()

    @zk.DataWatch("/kz/a/b")
    def on_data(data, stat):
        if data == b"changed":
            seen.set()

    zk.set("/kz/a/b", b"changed")
    assert seen.wait(5), "data watch did not fire"
    kids = []
    kid_event = threading.Event()

    @zk.ChildrenWatch("/kz/a")
    def on_children(children):
        kids.append(sorted(children))
        if "c" in children:
            kid_event.set()

    zk.create("/kz/a/c", b"")
    assert kid_event.wait(5), "children watch did not fire: %r" % kids

    # Sequential ephemerals and a transaction that must roll back.
    p = zk.create("/kz/seq-", b"", sequence=True, ephemeral=True)
    assert p.startswith("/kz/seq-") and len(p) == len("/kz/seq-") + 10, p
    tx = zk.transaction()
    tx.create("/kz/t1", b"1")
    tx.check("/kz/a/b", 99)
    res = tx.commit()
    assert len(res) == 2 and isinstance(res[1], BadVersionError), res
    assert not zk.exists("/kz/t1"), "failed transaction applied its create"
    tx = zk.transaction()
    tx.create("/kz/t2", b"2")
    tx.set_data("/kz/t2", b"3")
    res = tx.commit()
    assert res[0] == "/kz/t2", res
    assert zk.get("/kz/t2")[0] == b"3"

    # kazoo's lock recipe: FIFO hand-off between two sessions.
    zk2 = KazooClient(hosts=hosts, timeout=10)
    zk2.start(timeout=15)
    l1, l2 = Lock(zk, "/kz/lock"), Lock(zk2, "/kz/lock")
    l1.acquire()
    got = []
    t = threading.Thread(target=lambda: (l2.acquire(), got.append(1)))
    t.start()
    time.sleep(0.5)
    assert not got, "second client acquired a held lock"
    l1.release()
    t.join(10)
    assert got, "lock not handed over on release"
    l2.release()

    # Election recipe.
    won = threading.Event()
    e = Election(zk2, "/kz/election", "me")
    th = threading.Thread(target=lambda: e.run(won.set), daemon=True)
    th.start()
    assert won.wait(10), "election not won"

    # A session's ephemerals go when it closes.
    zk2.create("/kz/eph", b"", ephemeral=True)
    zk2.stop()
    zk2.close()
    deadline = time.time() + 10
    while zk.exists("/kz/eph") and time.time() < deadline:
        time.sleep(0.05)
    assert not zk.exists("/kz/eph"), "ephemeral survived its session"

    zk.stop()
    zk.close()
    print("KAZOO SMOKE OK")


if __name__ == "__main__":
    main(sys.argv[1])
