package chaos

import (
	"fmt"
	"sort"

	"github.com/anishathalye/porcupine"
)

// The linearizability model: a versioned register per key (a znode without
// children), with ZooKeeper's version rules. Partitioned by key, so each
// key's history is checked on its own.

type kvOpKind uint8

const (
	opGet    kvOpKind = iota // linearizable read
	opSet                    // SetData (Version -1: unconditional)
	opCreate                 // Create (persistent)
	opDelete                 // Delete (Version -1: unconditional)
	opMulti                  // Multi(Check(version), SetData(-1)): a CAS in a transaction
)

func (k kvOpKind) String() string {
	return [...]string{"get", "set", "create", "delete", "multi"}[k]
}

type kvInput struct {
	Op      kvOpKind
	Key     string
	Value   string
	Version int32
}

// Result codes of a known outcome.
const (
	resOK = iota
	resNoNode
	resBadVersion
	resNodeExists
	resNotEmpty
)

type kvOutput struct {
	Unknown bool // outcome unknown: any effect consistent with the state
	Code    int
	Value   string // get: the data read
	Version int32  // get, set, multi: the node's version after the op
}

// kvState is one key's state; comparable, so == is the model's equality.
type kvState struct {
	Exists  bool
	Value   string
	Version int32
}

// kvApply returns what op does to s: the result code, the new state and
// the version the reply should carry.
func kvApply(s kvState, in kvInput) (int, kvState) {
	switch in.Op {
	case opGet:
		if !s.Exists {
			return resNoNode, s
		}
		return resOK, s
	case opSet, opMulti:
		if !s.Exists {
			return resNoNode, s
		}
		if in.Version >= 0 && in.Version != s.Version {
			return resBadVersion, s
		}
		return resOK, kvState{Exists: true, Value: in.Value, Version: s.Version + 1}
	case opCreate:
		if s.Exists {
			return resNodeExists, s
		}
		return resOK, kvState{Exists: true, Value: in.Value}
	case opDelete:
		if !s.Exists {
			return resNoNode, s
		}
		if in.Version >= 0 && in.Version != s.Version {
			return resBadVersion, s
		}
		return resOK, kvState{}
	}
	panic("unknown op")
}

// KVModel is the porcupine model of the key-value workload.
var KVModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(kvInput).Key
			if _, ok := by[k]; !ok {
				keys = append(keys, k)
			}
			by[k] = append(by[k], op)
		}
		sort.Strings(keys)
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, by[k])
		}
		return out
	},
	Init: func() any { return kvState{} },
	Step: func(state, input, output any) (bool, any) {
		s, in, out := state.(kvState), input.(kvInput), output.(kvOutput)
		code, next := kvApply(s, in)
		if out.Unknown {
			return true, next
		}
		if code != out.Code {
			return false, s
		}
		switch {
		case code != resOK:
			return true, s
		case in.Op == opGet:
			return out.Value == s.Value && out.Version == s.Version, s
		case in.Op == opSet:
			return out.Version == next.Version, next
		}
		return true, next
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(kvInput), output.(kvOutput)
		var res string
		switch {
		case out.Unknown:
			res = "?"
		case out.Code != resOK:
			res = [...]string{"ok", "NoNode", "BadVersion", "NodeExists", "NotEmpty"}[out.Code]
		case in.Op == opGet:
			res = fmt.Sprintf("%q v%d", out.Value, out.Version)
		case in.Op == opSet:
			res = fmt.Sprintf("ok v%d", out.Version)
		default:
			res = "ok"
		}
		switch in.Op {
		case opGet:
			return fmt.Sprintf("get(%s) → %s", in.Key, res)
		case opSet, opMulti:
			return fmt.Sprintf("%s(%s, %q, v%d) → %s", in.Op, in.Key, in.Value, in.Version, res)
		case opCreate:
			return fmt.Sprintf("create(%s, %q) → %s", in.Key, in.Value, res)
		}
		return fmt.Sprintf("delete(%s, v%d) → %s", in.Key, in.Version, res)
	},
	DescribeState: func(state any) string {
		s := state.(kvState)
		if !s.Exists {
			return "absent"
		}
		return fmt.Sprintf("%q v%d", s.Value, s.Version)
	},
}
