"""Runs kazoo's own test suite against Meridian and judges the result.

kazoo's harness starts "ZooKeeper" by executing `java ... QuorumPeerMain
zoo.cfg`; tests/compat/javashim/java, first on PATH, runs `meridian server
--zoo-cfg zoo.cfg` instead. Every test kazoo ships runs. The run fails if

  - a test fails or errors that kazoo-expected-failures.txt does not list,
  - a listed test passes (the list must stay true), or
  - fewer than 95% of the collected tests pass.

A test in RACES (a race in kazoo's own test, seen against ZooKeeper too)
that fails is run once more on its own and counts as passed only if that
run passes; the report names every test that needed the second run.

With MERIDIAN_KEYSPACE=/kazootests every test's chroot is in a regional
keyspace (meridian_keyspace.py).

Usage: kazoo_suite.py MERIDIAN_BIN [pytest args...]
"""

import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
MIN_PASS_RATE = 0.95

# kazoo tests whose outcome depends on thread timing in kazoo itself, with
# the upstream evidence. test id -> (pytest -k expression, why).
RACES = {
    "test_sasl.TestSASLDigestAuthentication::test_invalid_sasl_auth": (
        "test_sasl and TestSASLDigestAuthentication and test_invalid_sasl_auth",
        "start() returns once the session is CONNECTED, before the SASL step "
        "fails; it raises AuthFailedError only if its chroot check is queued "
        "before the failure arrives, else a time-out (python-zk/kazoo#547: "
        "'sometimes it ends up with a KazooTimeoutError', against ZooKeeper)"),
    # The same window: kazoo sends auth_data after CONNECTED too.
    "test_sasl.TestLegacySASLDigestAuthentication::test_invalid_sasl_auth": (
        "test_sasl and TestLegacySASLDigestAuthentication and test_invalid_sasl_auth",
        "as TestSASLDigestAuthentication's: the auth packet is sent after "
        "start() can return (python-zk/kazoo#547)"),
}


def expected_failures():
    out = {}
    with open(os.path.join(HERE, "kazoo-expected-failures.txt")) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            test, _, reason = line.partition(" ")
            out[test] = reason.strip().lstrip("#").strip()
    return out


def stuck_shutdowns(log):
    """(count, first report) of the shutdown watchdog's reports in log, or None."""
    try:
        with open(log, errors="replace") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return None
    starts = [i for i, l in enumerate(lines) if "shutdown did not finish" in l]
    if not starts:
        return None
    return len(starts), "\n".join(lines[starts[0]:starts[0] + 600])


def run_pytest(env, tmp, xml, args):
    """Runs pytest on kazoo's tests; returns {test id: passed|failed|skipped}."""
    report = os.path.join(tmp, xml)
    cmd = [
        sys.executable, "-m", "pytest",
        "-q", "-p", "no:cacheprovider", "-p", "no:warnings",
        "--timeout", "120", "-rfE", "--junitxml", report,
    ] + args
    subprocess.run(cmd, env=env, cwd=tmp)
    results = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        # e.g. test_client.TestReconfig::test_bad_input
        cls = case.get("classname").removeprefix("kazoo.tests.")
        name = "%s::%s" % (cls, case.get("name"))
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed"
            elif child.tag == "skipped" and outcome == "passed":
                outcome = "skipped"
        if outcome == "failed" or name not in results:
            results[name] = outcome
    return results


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    meridian = os.path.abspath(sys.argv[1])
    env = dict(os.environ)
    env.update(
        PATH=os.path.join(HERE, "javashim") + os.pathsep + env["PATH"],
        MERIDIAN_BIN=meridian,
        # The ZooKeeper release whose protocol Meridian implements
        # (server.ZooKeeperVersion); kazoo's test_build checks it.
        ZOOKEEPER_VERSION="3.8.4",
        # Only needs to be set: the shim ignores the classpath.
        ZOOKEEPER_CLASSPATH="meridian",
        CI="true",
        # kazoo's zoo.cfg has no sslQuorum: its servers talk in plaintext,
        # which Meridian accepts from a zoo.cfg only when told to. Its
        # 4lw.commands.whitelist=* and maxClientCnxns=0 map as written.
        MERIDIAN_SHIM_DEFINES="meridian.insecure=true",
    )
    pytest_args = ["--pyargs", "kazoo.tests"]
    if env.get("MERIDIAN_KEYSPACE"):
        # Every test's chroot inside a regional keyspace (meridian_keyspace.py).
        env["PYTHONPATH"] = HERE + os.pathsep + env.get("PYTHONPATH", "")
        pytest_args = ["-p", "meridian_keyspace"] + pytest_args
    with tempfile.TemporaryDirectory() as tmp:
        # Every server's log in one file: a server that hangs while stopping
        # exits after 30 s with its goroutine stacks there (cmd/meridian's
        # shutdown watchdog); the run fails and shows them.
        env["MERIDIAN_SHIM_LOG"] = os.path.join(tmp, "servers.log")
        results = run_pytest(env, tmp, "junit.xml", pytest_args + sys.argv[2:])
        retried = []
        for name, (expr, _) in RACES.items():
            if results.get(name) == "failed":
                again = run_pytest(env, tmp, "retry.xml", pytest_args + ["-k", expr])
                retried.append((name, again.get(name, "not run")))
                if again.get(name) == "passed":
                    results[name] = "passed"
        stuck = stuck_shutdowns(env["MERIDIAN_SHIM_LOG"])

    expected = expected_failures()
    passed = [n for n, o in results.items() if o == "passed"]
    failed = sorted(n for n, o in results.items() if o == "failed")
    skipped = sorted(n for n, o in results.items() if o == "skipped")
    unexpected = [n for n in failed if n not in expected]
    fixed = sorted(n for n in expected if results.get(n) == "passed")
    missing = sorted(n for n in expected if n not in results)
    rate = len(passed) / max(1, len(results))

    where = " (chroots in keyspace %s)" % env["MERIDIAN_KEYSPACE"] if env.get("MERIDIAN_KEYSPACE") else ""
    print("\nkazoo suite%s: %d tests, %d passed, %d failed, %d skipped: %.1f%% pass"
          % (where, len(results), len(passed), len(failed), len(skipped), 100 * rate))
    for n in failed:
        print("  %s %s  %s" % ("expected" if n in expected else "UNEXPECTED", n, expected.get(n, "")))
    for n in skipped:
        print("  skipped %s  %s" % (n, expected.get(n, "")))
    for n, outcome in retried:
        print("  failed once, %s when run again: %s  (%s)" % (outcome, n, RACES[n][1]))
    ok = True
    if stuck:
        print("FAIL: %d server(s) did not stop within 30 s of SIGTERM; the first one's stacks:" % stuck[0])
        print(stuck[1])
        ok = False
    if unexpected:
        print("FAIL: %d failures not in kazoo-expected-failures.txt" % len(unexpected))
        ok = False
    if fixed:
        print("FAIL: now passing, remove from kazoo-expected-failures.txt: " + ", ".join(fixed))
        ok = False
    if missing and len(sys.argv) == 2:
        print("FAIL: listed but not run: " + ", ".join(missing))
        ok = False
    if rate < MIN_PASS_RATE:
        print("FAIL: pass rate %.1f%% is below %.0f%%" % (100 * rate, 100 * MIN_PASS_RATE))
        ok = False
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
