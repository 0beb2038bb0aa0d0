package window_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/acyclicfs/acyclicfs/window"
	"github.com/acyclicfs/acyclicfs/window/windowtest"
)

// fuzzSeeds returns encodings of real states in every phase.
func fuzzSeeds(tb testing.TB) [][]byte {
	ctx := context.Background()
	clock := window.NewManualClock(1000)
	st := window.NewMemoryStore()
	c := window.NewCoordinator(st, clock)
	var out [][]byte
	snap := func() {
		s, err := st.Load(ctx, "agent")
		if err != nil {
			tb.Fatal(err)
		}
		b, err := window.EncodeSnapshot(s)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, b)
	}
	a, _ := c.Begin(ctx, "agent", windowtest.Gen(1), "tool-1", time.Second)
	snap()
	_, _ = c.Begin(ctx, "agent", windowtest.Gen(1), "tool-2", time.Second)
	_, _ = c.ObserveParent(ctx, "agent", windowtest.Gen(2))
	snap()
	_, _ = c.Renew(ctx, a, 2*time.Second)
	clock.Advance(time.Hour)
	rc, _, _ := c.ClaimReconcile(ctx, "agent")
	_, _ = c.ObserveParent(ctx, "agent", windowtest.Gen(3))
	snap()
	_, _, _ = c.CompleteReconcile(ctx, "agent", rc.Ticket)
	snap()
	return out
}

func FuzzDecodeSnapshot(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Add([]byte(`{"version":1,"revision":1,"workspace":"a","phase":{"kind":"idle"}}`))
	f.Add([]byte(`{"version":2,"revision":1,"workspace":"a","phase":{"kind":"idle"}}`))
	f.Add([]byte(`{"version":1,"revision":1,"workspace":"a","phase":{"kind":"active","leases":{}}}`))
	f.Add([]byte(`{"version":1,"revision":1,"workspace":"a","phase":{"kind":"idle"},"x":1}`))
	f.Add([]byte(`{"version":1,"revi`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := window.DecodeSnapshot(data)
		if err != nil {
			if !errors.Is(err, window.ErrIncompatibleState) {
				t.Fatalf("decode error %v does not wrap ErrIncompatibleState", err)
			}
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("decoded snapshot invalid: %v", err)
		}
		enc, err := window.EncodeSnapshot(s)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		s2, err := window.DecodeSnapshot(enc)
		if err != nil {
			t.Fatalf("decode of own encoding %s: %v", enc, err)
		}
		enc2, err := window.EncodeSnapshot(s2)
		if err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("encoding is not a fixpoint:\n%s\n%s (%v)", enc, enc2, err)
		}
	})
}
