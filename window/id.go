package window

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"time"
)

// idSize is the length of lease ids and tickets in bytes.
const idSize = 16

// LeaseID is the stable identity of one tool lease: 16 bytes, the first six
// a big-endian Unix millisecond timestamp and the rest random, so ids sort
// roughly by creation time. The zero LeaseID is invalid.
type LeaseID [16]byte

// Ticket is the stable retry identity of one reconciliation. Same layout as
// LeaseID. The zero Ticket is invalid.
type Ticket [16]byte

// newID16 returns a time-ordered random id. crypto/rand never fails on the
// supported platforms, and the timestamp prefix keeps the id non-zero even
// if it did.
func newID16(nowMillis int64) [idSize]byte {
	var b [idSize]byte
	var ts [8]byte
	binary.BigEndian.PutUint64(ts[:], uint64(nowMillis))
	copy(b[:6], ts[2:])
	_, _ = rand.Read(b[6:])
	if b == ([idSize]byte{}) {
		b[idSize-1] = 1
	}
	return b
}

// NewLeaseID returns a fresh time-ordered lease id.
func NewLeaseID() LeaseID { return LeaseID(newID16(time.Now().UnixMilli())) }

// NewTicket returns a fresh time-ordered reconciliation ticket.
func NewTicket() Ticket { return Ticket(newID16(time.Now().UnixMilli())) }

func parseID16(kind, s string) ([idSize]byte, error) {
	var b [idSize]byte
	if len(s) != 2*idSize {
		return b, fmt.Errorf("%s %q: not %d hex characters", kind, s, 2*idSize)
	}
	if _, err := hex.Decode(b[:], []byte(s)); err != nil {
		return b, fmt.Errorf("%s %q: %w", kind, s, err)
	}
	if b == ([idSize]byte{}) {
		return b, fmt.Errorf("%s %q: zero id", kind, s)
	}
	return b, nil
}

// ParseLeaseID parses the 32-character hex form printed by String.
func ParseLeaseID(s string) (LeaseID, error) {
	b, err := parseID16("lease id", s)
	return LeaseID(b), err
}

// String returns the lowercase hex form.
func (id LeaseID) String() string { return hex.EncodeToString(id[:]) }

// IsZero reports whether id is the invalid zero id.
func (id LeaseID) IsZero() bool { return id == LeaseID{} }

// MarshalText encodes the id as hex (used by JSON, including as a map key).
func (id LeaseID) MarshalText() ([]byte, error) { return []byte(id.String()), nil }

// UnmarshalText decodes a hex id; the zero id is rejected.
func (id *LeaseID) UnmarshalText(b []byte) error {
	p, err := ParseLeaseID(string(b))
	if err != nil {
		return err
	}
	*id = p
	return nil
}

// ParseTicket parses the 32-character hex form printed by String.
func ParseTicket(s string) (Ticket, error) {
	b, err := parseID16("ticket", s)
	return Ticket(b), err
}

// String returns the lowercase hex form.
func (t Ticket) String() string { return hex.EncodeToString(t[:]) }

// IsZero reports whether t is the invalid zero ticket.
func (t Ticket) IsZero() bool { return t == Ticket{} }

// MarshalText encodes the ticket as hex; the zero ticket encodes as "".
func (t Ticket) MarshalText() ([]byte, error) {
	if t.IsZero() {
		return []byte{}, nil
	}
	return []byte(t.String()), nil
}

// UnmarshalText decodes a hex ticket; "" is the zero ticket.
func (t *Ticket) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*t = Ticket{}
		return nil
	}
	p, err := ParseTicket(string(b))
	if err != nil {
		return err
	}
	*t = p
	return nil
}
