package corestate

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// envelope is the on-disk form of every record: the value plus the revision
// that compare-and-swap fences on. Revisions start at 1; 0 means "absent".
type envelope struct {
	Revision uint64          `json:"revision"`
	Value    json.RawMessage `json:"value"`
}

// encodeEnvelope renders an envelope with a compact value, so equal values
// always have equal bytes (journal recovery compares them).
func encodeEnvelope(e envelope) ([]byte, error) {
	return json.Marshal(e)
}

// decodeEnvelope parses and validates a record file. Missing fields, a zero
// revision and trailing bytes (a torn or concatenated write) are corrupt.
func decodeEnvelope(b []byte) (envelope, error) {
	var raw struct {
		Revision *uint64         `json:"revision"`
		Value    json.RawMessage `json:"value"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return envelope{}, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if trailing(dec) {
		return envelope{}, fmt.Errorf("%w: trailing data after record", ErrCorrupt)
	}
	if raw.Revision == nil || *raw.Revision == 0 {
		return envelope{}, fmt.Errorf("%w: record has no revision", ErrCorrupt)
	}
	if len(raw.Value) == 0 {
		return envelope{}, fmt.Errorf("%w: record has no value", ErrCorrupt)
	}
	v, err := compactJSON(raw.Value)
	if err != nil {
		return envelope{}, err
	}
	return envelope{Revision: *raw.Revision, Value: v}, nil
}

// trailing reports whether anything but whitespace follows the first value.
func trailing(dec *json.Decoder) bool {
	rest := dec.Buffered()
	var buf [64]byte
	for {
		n, err := rest.Read(buf[:])
		if len(bytes.TrimSpace(buf[:n])) > 0 {
			return true
		}
		if err != nil || n == 0 {
			return false
		}
	}
}

func compactJSON(v []byte) (json.RawMessage, error) {
	var out bytes.Buffer
	if err := json.Compact(&out, v); err != nil {
		return nil, fmt.Errorf("%w: value is not JSON: %v", ErrCorrupt, err)
	}
	return json.RawMessage(out.Bytes()), nil
}

func sameEnvelope(a, b *envelope) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return a.Revision == b.Revision && bytes.Equal(a.Value, b.Value)
}
