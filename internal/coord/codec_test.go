package coord

import (
	"encoding/hex"
	"reflect"
	"testing"
)

// TestDecodeBytesOfEarlierRelease decodes entries encoded by the codec as it
// was when Command.Name was still called Lock: raft logs and snapshots
// written then must read the same now, and encoding the decoded command
// must give the same bytes back (the rename changed no byte).
func TestDecodeBytesOfEarlierRelease(t *testing.T) {
	for _, tc := range []struct {
		hex  string
		want Command
	}{
		{"c10101010780a0abfef96254e807000006000b6a6f62732f6c6561646572000176",
			Command{ID: 7, TimeMs: 1700000000000, Session: 42, Op: OpAcquire, Name: "jobs/leader", Mode: Shared, Wait: true, DelayMs: 500, Permits: 3, Value: []byte("v")}},
		{"c106000008005400006300000b6a6f62732f6c65616465720301020300",
			Command{ID: 8, Session: 42, Op: OpFenced, Name: "jobs/leader", Token: 99, Inner: []byte{1, 2, 3}}},
		{"c1090000090000000000000004776f726b00046974656d",
			Command{ID: 9, Op: OpPush, Name: "work", Value: []byte("item")}},
		{"c10a00010a000a000000000004776f726b000001f02e0100000000",
			Command{ID: 10, Session: 5, Op: OpPop, Name: "work", Wait: true, VisibilityMs: 3000, Detach: true}},
		{"c11300000b000000000000000d7072656665722d726567696f6e00026575",
			Command{ID: 11, Op: OpSetting, Name: "prefer-region", Value: []byte("eu")}},
		{"c10100000c000c0000000000046e65617200000200000000000002757304",
			Command{ID: 12, Session: 6, Op: OpAcquire, Name: "near", Region: "us", LocalFirst: 2}},
	} {
		b, err := hex.DecodeString(tc.hex)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Decode(b)
		if err != nil {
			t.Fatalf("%s: %v", tc.hex, err)
		}
		// The decoder gives empty, not nil, byte fields: compare what they hold.
		norm := func(c Command) Command {
			if len(c.Inner) == 0 {
				c.Inner = nil
			}
			if len(c.Value) == 0 {
				c.Value = nil
			}
			return c
		}
		if !reflect.DeepEqual(norm(*got), norm(tc.want)) {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.hex, *got, tc.want)
		}
		again, err := Encode(&tc.want)
		if err != nil {
			t.Fatal(err)
		}
		if hex.EncodeToString(again) != tc.hex {
			t.Errorf("re-encoded %s, want %s", hex.EncodeToString(again), tc.hex)
		}
	}
}
