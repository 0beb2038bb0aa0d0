package blobs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"lukechampine.com/blake3"

	"github.com/acyclicfs/acyclicfs/internal/osfile"
)

// copyBufSize is large enough for BLAKE3's SIMD paths to hash several
// chunks per call, small enough that many concurrent imports stay cheap.
const copyBufSize = 256 << 10

var copyBufs = sync.Pool{New: func() any { b := make([]byte, copyBufSize); return &b }}

// Sparse blobs. A file with at least sparseMinHoles bytes of holes is
// stored sparse: the object file has the same logical content and real
// holes, and its ID is computed over the content's non-zero blocks and
// where they are (sparseHasher), so that capturing, verifying and
// exporting it read only its data. The encoding a blob has is not
// recorded: an object file is checked against its ID with the encoding
// its holes suggest, then with the other (see verifyObject).
//
// A sparse ID is a pure function of the logical content: zero blocks count
// as holes whether they are holes on disk or written zeros. But the same
// content stored dense (a file without holes) has its dense ID, so two
// copies of one content, one sparse and one dense, are two blobs (see
// docs/format.md, "Sparse blobs").

// sparseBlock is the granularity of a sparse blob's extent map: an
// aligned block of zeros is a hole.
const sparseBlock = 4096

// sparseMinHoles is how many bytes of holes make a file stored sparse.
const sparseMinHoles = 1 << 20

const domainSparseBlob = "acyclicfs sparse blob v1\x00"

var zeroBlock [sparseBlock]byte

// contentHasher hashes a blob's logical content in order; Sum gives its ID
// in one of the two encodings.
type contentHasher interface {
	io.Writer
	Sum() ID
}

// sparseHasher computes a sparse blob's ID from its logical content:
// BLAKE3 over the domain, the length (u64le), the hash of its extent map
// (each maximal run of non-zero aligned sparseBlock blocks as offset and
// length, u64le each) and the hash of the runs' bytes concatenated. Holes
// can be skipped (zeros) without being read.
type sparseHasher struct {
	n       int64 // logical bytes consumed into whole blocks
	data    *blake3.Hasher
	extents *blake3.Hasher
	inRun   bool
	runOff  int64
	runEnd  int64
	part    [sparseBlock]byte // a block not yet complete
	partN   int
}

func newSparseHasher() *sparseHasher {
	return &sparseHasher{data: blake3.New(IDSize, nil), extents: blake3.New(IDSize, nil)}
}

// Write adds logical content.
func (h *sparseHasher) Write(p []byte) (int, error) {
	total := len(p)
	if h.partN > 0 {
		c := copy(h.part[h.partN:], p)
		h.partN += c
		p = p[c:]
		if h.partN < sparseBlock {
			return total, nil
		}
		h.partN = 0
		h.blocks(h.part[:])
	}
	full := len(p) &^ (sparseBlock - 1)
	if full > 0 {
		h.blocks(p[:full])
	}
	h.partN = copy(h.part[:], p[full:])
	return total, nil
}

// zeros adds n zero bytes without hashing them.
func (h *sparseHasher) zeros(n int64) {
	if n > 0 && h.partN > 0 {
		c := min(int64(sparseBlock-h.partN), n)
		h.Write(zeroBlock[:c])
		n -= c
	}
	if n <= 0 {
		return
	}
	if whole := n &^ (sparseBlock - 1); whole > 0 {
		h.endRun()
		h.n += whole
		n -= whole
	}
	if n > 0 {
		clear(h.part[:n])
		h.partN = int(n)
	}
}

// blocks consumes b, whole blocks but for the last block of the content.
func (h *sparseHasher) blocks(b []byte) {
	start := 0 // of the non-zero bytes not yet hashed
	for i := 0; i < len(b); i += sparseBlock {
		end := min(i+sparseBlock, len(b))
		off := h.n + int64(i)
		if isZero(b[i:end]) {
			h.data.Write(b[start:i])
			start = end
			h.endRun()
			continue
		}
		if !h.inRun {
			h.inRun, h.runOff = true, off
		}
		h.runEnd = off + int64(end-i)
	}
	h.data.Write(b[start:])
	h.n += int64(len(b))
}

func (h *sparseHasher) endRun() {
	if !h.inRun {
		return
	}
	var rec [16]byte
	binary.LittleEndian.PutUint64(rec[:8], uint64(h.runOff))
	binary.LittleEndian.PutUint64(rec[8:], uint64(h.runEnd-h.runOff))
	h.extents.Write(rec[:])
	h.inRun = false
}

func isZero(b []byte) bool {
	for len(b) > 0 {
		n := min(len(b), sparseBlock)
		if string(b[:n]) != string(zeroBlock[:n]) {
			return false
		}
		b = b[n:]
	}
	return true
}

// Sum returns the ID. It ends the content: call it once.
func (h *sparseHasher) Sum() ID {
	if h.partN > 0 {
		h.blocks(h.part[:h.partN])
		h.partN = 0
	}
	h.endRun()
	var payload [8 + 2*IDSize]byte
	binary.LittleEndian.PutUint64(payload[:8], uint64(h.n))
	h.extents.Sum(payload[8:8])
	h.data.Sum(payload[8+IDSize : 8+IDSize])
	return sparseID(payload[:])
}

// sparseID hashes a sparse blob's payload under its domain.
func sparseID(payload []byte) ID {
	var buf [len(domainSparseBlob) + 8 + 2*IDSize]byte
	b := append(append(buf[:0], domainSparseBlob...), payload...)
	return ID(blake3.Sum256(b))
}

// SparseSum returns the ID of content stored as a sparse object.
func SparseSum(content []byte) ID {
	h := newSparseHasher()
	h.Write(content)
	return h.Sum()
}

// isSparse reports whether the first size bytes of f are stored sparse.
func isSparse(f *os.File, size int64) (bool, error) {
	if size < sparseMinHoles {
		return false, nil
	}
	holes, err := osfile.HoleBytes(f, size)
	return holes >= sparseMinHoles, err
}

// errShrunk stops a scan at a file's new end.
var errShrunk = errors.New("file shrank")

// scanSparse feeds the first size bytes of f to h, reading only its data
// regions (widened to whole blocks), and gives each piece read to write
// (if not nil) with its offset. It returns how many bytes h consumed:
// fewer than size if f shrank meanwhile.
func scanSparse(f *os.File, size int64, h *sparseHasher, write func(p []byte, off int64) error) (int64, error) {
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	pos := int64(0) // logical bytes given to h
	err := osfile.DataExtents(f, size, func(d, e int64) error {
		d = max(d&^(sparseBlock-1), pos)
		e = min((e+sparseBlock-1)&^(sparseBlock-1), size)
		h.zeros(d - pos)
		pos = max(pos, d)
		for pos < e {
			n := int(min(int64(len(buf)), e-pos))
			m, err := f.ReadAt(buf[:n], pos)
			if m > 0 {
				h.Write(buf[:m])
				if write != nil {
					if werr := write(buf[:m], pos); werr != nil {
						return werr
					}
				}
				pos += int64(m)
			}
			switch {
			case m == n:
			case err == nil || errors.Is(err, io.EOF):
				return errShrunk
			default:
				return fmt.Errorf("read %s: %w", f.Name(), err)
			}
		}
		return nil
	})
	switch {
	case errors.Is(err, errShrunk):
		return pos, nil
	case err != nil:
		return pos, err
	}
	h.zeros(size - pos)
	return size, nil
}

// hashObject returns the ID of f's first size bytes in the given encoding.
func hashObject(f *os.File, size int64, sparse bool) (ID, int64, error) {
	if sparse {
		h := newSparseHasher()
		n, err := scanSparse(f, size, h, nil)
		if err != nil {
			return ID{}, n, err
		}
		return h.Sum(), n, nil
	}
	h := NewHasher()
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	n, err := io.CopyBuffer(h, io.NewSectionReader(f, 0, size), *bp)
	if err != nil {
		return ID{}, n, fmt.Errorf("read %s: %w", f.Name(), err)
	}
	return h.Sum(), n, nil
}

// hashOpenFile returns the ID the store gives f's content (sparse if f has
// enough holes) and its length.
func hashOpenFile(f *os.File) (ID, int64, error) {
	fi, err := f.Stat()
	if err != nil {
		return ID{}, 0, err
	}
	sparse, err := isSparse(f, fi.Size())
	if err != nil {
		return ID{}, 0, err
	}
	return hashObject(f, fi.Size(), sparse)
}

// FileSum returns the ID PutFile gives the content of the file at path,
// and its length, without storing it.
func FileSum(path string) (ID, int64, error) {
	f, err := osfile.Open(path, os.O_RDONLY, 0)
	if err != nil {
		return ID{}, 0, err
	}
	defer f.Close()
	id, n, err := hashOpenFile(f)
	if err != nil {
		return ID{}, 0, fmt.Errorf("hash %s: %w", path, err)
	}
	return id, n, nil
}

// verifyObject checks an object file's content against id: in the
// encoding its holes suggest, else in the other one (a sparse blob copied
// dense, or a dense one whose zeros became holes, still verifies).
func verifyObject(f *os.File, id ID) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	sparse, err := isSparse(f, fi.Size())
	if err != nil {
		return err
	}
	got, _, err := hashObject(f, fi.Size(), sparse)
	if err != nil || got == id {
		return err
	}
	if other, _, err := hashObject(f, fi.Size(), !sparse); err != nil || other == id {
		return err
	}
	return fmt.Errorf("%w: blob %s: content hashes to %s", ErrCorrupt, id.Short(), got.Short())
}

// VerifyFile checks the object file at path against id (in either
// encoding): an error wrapping ErrCorrupt if its content does not match.
func VerifyFile(path string, id ID) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return verifyObject(f, id)
}
