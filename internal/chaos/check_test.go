package chaos

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/meridian-coord/meridian/internal/errs"
)

// The checkers must be able to fail: each gets a history with a known
// violation and one without.

func op(client int, in kvInput, call int64, out kvOutput, ret int64) porcupine.Operation {
	return porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret}
}

func TestLinearizableCheckerCatchesStaleRead(t *testing.T) {
	k := "/chaos/kv/k0"
	good := []porcupine.Operation{
		op(0, kvInput{Op: opCreate, Key: k, Value: "a"}, 0, kvOutput{}, 10),
		op(1, kvInput{Op: opSet, Key: k, Value: "b", Version: 0}, 20, kvOutput{Version: 1}, 30),
		op(2, kvInput{Op: opGet, Key: k}, 25, kvOutput{Value: "a", Version: 0}, 35), // concurrent: may see a
		op(0, kvInput{Op: opSet, Key: k, Value: "c", Version: 7}, 40, kvOutput{Unknown: true}, -1),
		op(2, kvInput{Op: opGet, Key: k}, 50, kvOutput{Value: "b", Version: 1}, 60),
	}
	res, err := checkLinearizable(good, t.TempDir(), 0)
	if err != nil || res.Result != porcupine.Ok || res.Unknown != 1 {
		t.Fatalf("good history: %+v %v", res, err)
	}
	bad := append(good, op(2, kvInput{Op: opGet, Key: k}, 70, kvOutput{Value: "a", Version: 0}, 80)) // went back
	dir := t.TempDir()
	res, err = checkLinearizable(bad, dir, 0)
	if err != nil || res.Result != porcupine.Illegal {
		t.Fatalf("stale read not caught: %+v %v", res, err)
	}
	if res.Viz != filepath.Join(dir, "porcupine.html") {
		t.Fatalf("viz path %q", res.Viz)
	}
	if b, err := os.ReadFile(res.Viz); err != nil || !strings.Contains(string(b), "get(") {
		t.Fatalf("visualization not written: %v", err)
	}
}

func TestLinearizableCheckerUnknownWriteMayApply(t *testing.T) {
	k := "/chaos/kv/k1"
	h := []porcupine.Operation{
		op(0, kvInput{Op: opCreate, Key: k, Value: "a"}, 0, kvOutput{Unknown: true}, -1),
		op(1, kvInput{Op: opGet, Key: k}, 100, kvOutput{Value: "a"}, 110),
		op(1, kvInput{Op: opDelete, Key: k, Version: 0}, 120, kvOutput{}, 130),
		op(1, kvInput{Op: opGet, Key: k}, 140, kvOutput{Code: resNoNode}, 150),
	}
	if res, _ := checkLinearizable(h, t.TempDir(), 0); res.Result != porcupine.Ok {
		t.Fatalf("unknown create that applied: %s", res.Result)
	}
	// A CAS that "succeeded" against the wrong version is illegal.
	h = append(h, op(1, kvInput{Op: opCreate, Key: k, Value: "x"}, 160, kvOutput{}, 170),
		op(1, kvInput{Op: opSet, Key: k, Value: "y", Version: 3}, 180, kvOutput{Version: 1}, 190))
	if res, _ := checkLinearizable(h, t.TempDir(), 0); res.Result != porcupine.Illegal {
		t.Fatalf("bad CAS accepted: %s", res.Result)
	}
}

func TestLockCheckerCatchesStaleFencedWrite(t *testing.T) {
	evs := []lockEvent{
		{Kind: evGrant, Worker: "a", Session: 1, Token: 10, Call: 0, Return: 5},
		{Kind: evFenced, Worker: "a", Session: 1, Token: 10, Call: 6, Return: 8, Version: 1, Value: "t10"},
		{Kind: evGrant, Worker: "b", Session: 2, Token: 20, Call: 1, Return: 30},
		{Kind: evFenced, Worker: "b", Session: 2, Token: 20, Call: 31, Return: 33, Version: 2, Value: "t20"},
		{Kind: evFenced, Worker: "a", Session: 1, Token: 10, Call: 40, Return: 41, Err: errs.ErrStaleToken},
	}
	if v := checkLocks(evs); len(v) != 0 {
		t.Fatalf("clean history flagged: %v", v)
	}
	stale := append(evs, lockEvent{Kind: evFenced, Worker: "a", Session: 1, Token: 10, Call: 50, Return: 52, Version: 3, Value: "late"})
	v := checkLocks(stale)
	if len(v) == 0 || !strings.Contains(strings.Join(v, "\n"), "stale fenced write accepted") {
		t.Fatalf("stale write not caught: %v", v)
	}
	if !strings.Contains(strings.Join(v, "\n"), "went back in token order") {
		t.Fatalf("token order of the protected value not checked: %v", v)
	}
	overlap := append(evs, lockEvent{Kind: evRelease, Worker: "a", Session: 1, Token: 10, Call: 45, Return: 46})
	if v := checkLocks(overlap); len(v) == 0 || !strings.Contains(v[0], "exclusion") {
		t.Fatalf("overlapping holds not caught: %v", v)
	}
	order := append(evs, lockEvent{Kind: evGrant, Worker: "c", Session: 3, Token: 15, Call: 35, Return: 36})
	if v := checkLocks(order); len(v) == 0 || !strings.Contains(strings.Join(v, "\n"), "token order") {
		t.Fatalf("token order of grants not checked: %v", v)
	}
}

func TestSequentialCheckerCatchesGoingBack(t *testing.T) {
	acked := []ackedWrite{{Key: "k", Zxid: 10}, {Key: "k", Zxid: 20}}
	ok := []seqRead{{Key: "k", SeenZx: 15, Exists: true, Mzxid: 10}, {Key: "k", SeenZx: 25, Exists: true, Mzxid: 20}}
	if v := checkSequential(ok, acked); len(v) != 0 {
		t.Fatalf("flagged: %v", v)
	}
	bad := []seqRead{{Key: "k", SeenZx: 20, Exists: true, Mzxid: 10}}
	if v := checkSequential(bad, acked); len(v) != 1 {
		t.Fatalf("stale sequential read not caught: %v", v)
	}
}

func TestDurableChecker(t *testing.T) {
	cs := []durableCreate{{Path: "/a", Acked: true}, {Path: "/b", Acked: false}, {Path: "/c", Acked: true}}
	n, v := checkDurable(cs, map[string]bool{"/a": true})
	if n != 2 || len(v) != 1 || !strings.Contains(v[0], "/c") {
		t.Fatalf("lost write not caught: %d %v", n, v)
	}
}

func TestFlagCheckerCatchesOldConfig(t *testing.T) {
	writes := []flagWrite{{Pair: "ks→root", I: 1, CfgVersion: 1}, {Pair: "ks→root", I: 2, CfgVersion: 3}}
	good := []flagRead{{Pair: "ks→root", Reader: "fr0", I: 1, CfgVersion: 1}, {Pair: "ks→root", Reader: "fz0", I: 2, CfgVersion: 4}}
	if v := checkFlags(writes, good); len(v) != 0 {
		t.Fatalf("good reads: %v", v)
	}
	bad := append(good, flagRead{Pair: "ks→root", Reader: "fz0", I: 2, CfgVersion: 2})
	if v := checkFlags(writes, bad); len(v) != 1 || !strings.Contains(v[0], "older than version 3") {
		t.Fatalf("old config after the flag not caught: %v", v)
	}
	if v := checkFlags(writes, []flagRead{{Pair: "root→ks", Reader: "fr1", I: 1, CfgVersion: 9}}); len(v) != 1 {
		t.Fatalf("a flag never written not caught: %v", v)
	}
}

func TestKeyspaceAvailabilityChecker(t *testing.T) {
	const ms = int64(time.Millisecond)
	f := FaultRecord{Kind: KillKeyspaceLeader, Start: time.Second}
	ws := []writeTimes{{Call: 900 * ms, Return: 1100 * ms}, {Call: 1200 * ms, Return: 1500 * ms}}
	if v := checkKeyspaceAvailability(ws, []FaultRecord{f}, 10*time.Second, 500*time.Millisecond); len(v) != 0 {
		t.Fatalf("a write 0.5 s after the fault: %v", v)
	}
	// Only a write invoked before the fault was acknowledged after it.
	if v := checkKeyspaceAvailability(ws[:1], []FaultRecord{f}, 10*time.Second, 500*time.Millisecond); len(v) != 1 {
		t.Fatalf("no keyspace write after the fault not caught: %v", v)
	}
	// The bound had not passed when the workload ended: not judged.
	if v := checkKeyspaceAvailability(ws[:1], []FaultRecord{f}, 2*time.Second, 500*time.Millisecond); len(v) != 0 {
		t.Fatalf("judged before its bound: %v", v)
	}
}

func TestLockCheckerPerLock(t *testing.T) {
	// The same token in two locks is no violation; in one it is.
	evs := []lockEvent{
		{Kind: evGrant, Worker: "lk0", Session: 1, Lock: lockName, Token: 5, Call: 0, Return: 10},
		{Kind: evGrant, Worker: "lk1", Session: 2, Lock: "eu/chaos-lock", Token: 5, Call: 0, Return: 10},
	}
	if v := checkLocksEach(evs); len(v) != 0 {
		t.Fatalf("two locks: %v", v)
	}
	evs[1].Lock = lockName
	if v := checkLocksEach(evs); len(v) == 0 {
		t.Fatal("a token granted twice in one lock not caught")
	}
}
