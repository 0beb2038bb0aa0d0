package gitmerge

import (
	"bytes"
	"encoding/binary"
)

// indexBlobs adds the object names (binary, as strings) of the files an
// index lists:
// the blobs of the work tree. ok is false for anything it cannot parse
// (then nothing is known). hashLen is 20, or 32 for sha256.
func indexBlobs(data []byte, hashLen int, into map[string]bool) (ok bool) {
	if len(data) < 12 || string(data[:4]) != "DIRC" {
		return false
	}
	version := binary.BigEndian.Uint32(data[4:8])
	n := binary.BigEndian.Uint32(data[8:12])
	if version < 2 || version > 4 {
		return false
	}
	p := 12
	fixed := 40 + hashLen + 2
	var prev []byte
	for range n {
		if p+fixed > len(data) {
			return false
		}
		mode := binary.BigEndian.Uint32(data[p+24 : p+28])
		oid := data[p+40 : p+40+hashLen]
		flags := binary.BigEndian.Uint16(data[p+40+hashLen : p+fixed])
		q := p + fixed
		if version >= 3 && flags&0x4000 != 0 {
			q += 2
		}
		if q > len(data) {
			return false
		}
		if version == 4 {
			strip, k := binary.Uvarint(data[q:])
			if k <= 0 || strip > uint64(len(prev)) {
				return false
			}
			q += k
			end := bytes.IndexByte(data[q:], 0)
			if end < 0 {
				return false
			}
			name := append(append([]byte(nil), prev[:len(prev)-int(strip)]...), data[q:q+end]...)
			prev = name
			p = q + end + 1
		} else {
			end := bytes.IndexByte(data[q:], 0)
			if end < 0 {
				return false
			}
			// Entries are padded with 1 to 8 NULs to a multiple of 8.
			p += (q - p + end + 8) &^ 7
			if p > len(data) {
				return false
			}
		}
		if t := mode >> 12; t == 0o10 || t == 0o12 { // regular file, symlink
			into[string(oid)] = true
		}
	}
	return true
}
