package coord

import (
	"errors"
	"testing"

	"github.com/meridian-coord/meridian/internal/errs"
)

// TestDecodeNewerFormat: an operation or extension block version reserved
// for later binaries decodes as ErrNewerFormat, not as a malformed command;
// Encode refuses such an operation.
func TestDecodeNewerFormat(t *testing.T) {
	b, err := Encode(&Command{Op: OpAcquire, Name: "l"})
	if err != nil {
		t.Fatal(err)
	}
	op := append([]byte(nil), b...)
	op[1] = byte(lastOp) + 1
	if _, err := Decode(op); !errors.Is(err, ErrNewerFormat) {
		t.Errorf("later op: %v, want ErrNewerFormat", err)
	}
	op[1] = maxFutureOp + 1
	if _, err := Decode(op); err != nil {
		// As before: it decodes, and Apply answers it as unimplemented.
		t.Errorf("op beyond the reserved ones: %v, want it decoded", err)
	}
	ext := append(append([]byte(nil), b...), extVersion2+1, 0, 0, 0, 0, 0, 0)
	if _, err := Decode(ext); !errors.Is(err, ErrNewerFormat) {
		t.Errorf("later extension block: %v, want ErrNewerFormat", err)
	}
	ext[len(b)] = maxFutureExt + 1
	if _, err := Decode(ext); !errors.Is(err, errs.ErrMarshalling) {
		t.Errorf("extension version beyond the reserved ones: %v, want ErrMarshalling", err)
	}
	if _, err := Encode(&Command{Op: lastOp + 1}); !errors.Is(err, errs.ErrBadArguments) {
		t.Errorf("Encode of a later op: %v", err)
	}
	for c, want := range map[*Command]int{
		{Op: OpAcquire}:                              LevelBase,
		{Op: OpAcquire, Wait: true, DelayMs: 5}:      LevelBase,
		{Op: OpPush}:                                 LevelQueues,
		{Op: OpAcquire, Waiter: 3}:                   LevelQueues,
		{Op: OpSetting}:                              LevelLocalFirst,
		{Op: OpAcquire, LocalFirst: 1, Region: "eu"}: LevelLocalFirst,
	} {
		if got := c.Level(); got != want {
			t.Errorf("%+v: level %d, want %d", c, got, want)
		}
	}
}
