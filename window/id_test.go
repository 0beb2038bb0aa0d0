package window

import (
	"bytes"
	"testing"
)

func TestLeaseIDsAreTimeOrderedAndRoundTrip(t *testing.T) {
	a, b := LeaseID(newID16(1000)), LeaseID(newID16(1001))
	if bytes.Compare(a[:], b[:]) >= 0 {
		t.Fatalf("id of a later millisecond sorts first: %s %s", a, b)
	}
	p, err := ParseLeaseID(a.String())
	if err != nil || p != a {
		t.Fatalf("round trip %s: %s %v", a, p, err)
	}
	for _, bad := range []string{"", "00", "0000000000000000000000000000000g", "00000000000000000000000000000000"} {
		if _, err := ParseLeaseID(bad); err == nil {
			t.Errorf("ParseLeaseID(%q) accepted", bad)
		}
	}
	var zero Ticket
	if txt, _ := zero.MarshalText(); len(txt) != 0 {
		t.Fatalf("zero ticket encodes as %q", txt)
	}
}

func FuzzParseLeaseID(f *testing.F) {
	f.Add(NewLeaseID().String())
	f.Add("00000000000000000000000000000000")
	f.Add("ABCDEF0123456789abcdef0123456789")
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseLeaseID(s)
		tk, terr := ParseTicket(s)
		if (err == nil) != (terr == nil) || (err == nil && [16]byte(id) != [16]byte(tk)) {
			t.Fatalf("lease id and ticket parse %q differently: %v %v", s, err, terr)
		}
		if err != nil {
			return
		}
		if id.IsZero() {
			t.Fatal("zero id accepted")
		}
		again, err := ParseLeaseID(id.String())
		if err != nil || again != id {
			t.Fatalf("round trip of %q: %s %v", s, again, err)
		}
	})
}
