package phases

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// The two reads run at once: each waits for the other to have started, which one after the
// other never would.
func TestReadAtOnceOverlaps(t *testing.T) {
	aIn, bIn := make(chan struct{}), make(chan struct{})
	meet := func(mine, other chan struct{}) func() error {
		return func() error {
			close(mine)
			select {
			case <-other:
				return nil
			case <-time.After(5 * time.Second):
				return errors.New("the other read never started")
			}
		}
	}
	errA, errB := readAtOnce(meet(aIn, bIn), meet(bIn, aIn))
	if errA != nil || errB != nil {
		t.Fatalf("got %v, %v; want both reads at once", errA, errB)
	}
}

func TestReadAtOnceErrorsAndSkips(t *testing.T) {
	errX, errY := errors.New("x"), errors.New("y")
	var calls atomic.Int32
	read := func(err error) func() error { return func() error { calls.Add(1); return err } }
	if a, b := readAtOnce(read(errX), read(errY)); a != errX || b != errY {
		t.Errorf("got %v, %v; want x, y (each read's own error)", a, b)
	}
	calls.Store(0)
	if a, b := readAtOnce(readIf(false, read(errX)), readIf(true, read(errY))); a != nil || b != errY || calls.Load() != 1 {
		t.Errorf("got %v, %v after %d reads; want nil, y after 1 (a read not asked for is not made)", a, b, calls.Load())
	}
}

func TestReadAtOncePanicReachesCaller(t *testing.T) {
	defer func() {
		if v := recover(); v != "boom" {
			t.Errorf("recovered %v, want the second read's panic", v)
		}
	}()
	_, _ = readAtOnce(func() error { return nil }, func() error { panic("boom") })
	t.Error("readAtOnce returned; want the second read's panic raised again")
}
