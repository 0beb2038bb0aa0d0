package gitmerge

import (
	"bytes"
	"compress/zlib"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"sync"
)

// packEntry is one object of a pack being written.
type packEntry struct {
	oid  []byte // binary object name
	data []byte // the entry as stored in the pack (header + zlib)
	crc  uint32
	off  uint64
}

// pack writes objs (loose objects) into one pack with its index under
// src/pack/. It is how the temp repository gets the commits and trees it
// needs: a loose object needs its own objects/xx/ directory, and making
// 256 directories costs more than the whole merge on a filesystem with
// slow metadata (0.4 ms a mkdir on the VM this was measured on), while
// one pack is two files. Each object is inflated and stored again with
// no compression (deflate's stored blocks), so this is a copy at memory
// speed, not a recompression.
func (r *repo) pack(objs []object) error {
	if len(objs) == 0 {
		return nil
	}
	entries := make([]packEntry, len(objs))
	workers := min(runtime.GOMAXPROCS(0), 8, len(objs)/64+1)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			z := &zstate{}
			for i := w; i < len(objs); i += workers {
				e, err := r.packEntry(objs[i], z)
				if err != nil {
					errs[w] = err
					return
				}
				entries[i] = e
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	newHash := sha1.New
	if r.hexLen == 64 {
		newHash = sha256.New
	}
	var packBuf bytes.Buffer
	packBuf.WriteString("PACK")
	binary.Write(&packBuf, binary.BigEndian, uint32(2))
	binary.Write(&packBuf, binary.BigEndian, uint32(len(entries)))
	for i := range entries {
		entries[i].off = uint64(packBuf.Len())
		packBuf.Write(entries[i].data)
	}
	h := newHash()
	h.Write(packBuf.Bytes())
	sum := h.Sum(nil)
	packBuf.Write(sum)
	idx, err := packIndex(entries, sum, newHash)
	if err != nil {
		return err
	}
	name := filepath.Join(r.src, "pack", "pack-"+hex.EncodeToString(sum))
	if err := os.WriteFile(name+".pack", packBuf.Bytes(), 0o444); err != nil {
		return fmt.Errorf("gitmerge: write temp pack: %w", err)
	}
	if err := os.WriteFile(name+".idx", idx, 0o444); err != nil {
		return fmt.Errorf("gitmerge: write temp pack index: %w", err)
	}
	return nil
}

var objTypes = map[string]byte{"commit": 1, "tree": 2, "blob": 3, "tag": 4}

// zstate is one worker's reusable zlib state: a new deflate writer
// allocates hundreds of kilobytes.
type zstate struct {
	zr   io.ReadCloser
	zw   *zlib.Writer
	in   bytes.Reader
	out  bytes.Buffer
	body bytes.Buffer
}

func (r *repo) packEntry(o object, z *zstate) (packEntry, error) {
	oidHex := o.name[:2] + o.name[3:]
	oid, err := hex.DecodeString(oidHex)
	if err != nil || len(oid)*2 != r.hexLen {
		return packEntry{}, fmt.Errorf("%w: bad loose object name %s", ErrGit, o.name)
	}
	raw, err := r.readObjectFile(o)
	if err != nil {
		return packEntry{}, err
	}
	z.in.Reset(raw)
	if z.zr == nil {
		z.zr, err = zlib.NewReader(&z.in)
	} else {
		err = z.zr.(zlib.Resetter).Reset(&z.in, nil)
	}
	if err != nil {
		return packEntry{}, fmt.Errorf("%w: loose object %s: %w", ErrGit, o.name, err)
	}
	z.body.Reset()
	if _, err := z.body.ReadFrom(z.zr); err != nil {
		return packEntry{}, fmt.Errorf("%w: loose object %s: %w", ErrGit, o.name, err)
	}
	content := z.body.Bytes()
	nul := bytes.IndexByte(content, 0)
	if nul < 0 {
		return packEntry{}, fmt.Errorf("%w: loose object %s: no header", ErrGit, o.name)
	}
	typ, size, ok := bytes.Cut(content[:nul], []byte{' '})
	t := objTypes[string(typ)]
	n, err := strconv.ParseUint(string(size), 10, 64)
	body := content[nul+1:]
	if !ok || t == 0 || err != nil || n != uint64(len(body)) {
		return packEntry{}, fmt.Errorf("%w: loose object %s: bad header %q", ErrGit, o.name, content[:nul])
	}
	var hdr [16]byte
	hdr[0] = t<<4 | byte(n&0x0f)
	k := 1
	for n >>= 4; n > 0; n >>= 7 {
		hdr[k-1] |= 0x80
		hdr[k] = byte(n & 0x7f)
		k++
	}
	z.out.Reset()
	if z.zw == nil {
		z.zw, _ = zlib.NewWriterLevel(&z.out, zlib.NoCompression)
	} else {
		z.zw.Reset(&z.out)
	}
	z.zw.Write(body)
	if err := z.zw.Close(); err != nil {
		return packEntry{}, fmt.Errorf("gitmerge: pack %s: %w", o.name, err)
	}
	data := make([]byte, 0, k+z.out.Len())
	data = append(append(data, hdr[:k]...), z.out.Bytes()...)
	return packEntry{oid: oid, data: data, crc: crc32.ChecksumIEEE(data)}, nil
}

// readObjectFile reads a loose object's bytes from the store.
func (r *repo) readObjectFile(o object) ([]byte, error) {
	if bp, ok := r.m.Store.(BlobPather); ok {
		if b, err := os.ReadFile(bp.BlobPath(o.id)); err == nil {
			return b, nil
		}
	}
	rc, err := r.m.Store.OpenBlob(o.id)
	if err != nil {
		return nil, fmt.Errorf("gitmerge: open object %s (blob %s): %w", o.name, o.id.Short(), err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return nil, fmt.Errorf("gitmerge: read object %s: %w", o.name, err)
	}
	return b, nil
}

// packIndex builds a version 2 pack index.
func packIndex(entries []packEntry, packSum []byte, newHash func() hash.Hash) ([]byte, error) {
	sorted := make([]*packEntry, len(entries))
	for i := range entries {
		sorted[i] = &entries[i]
	}
	sort.Slice(sorted, func(a, b int) bool { return bytes.Compare(sorted[a].oid, sorted[b].oid) < 0 })
	var buf bytes.Buffer
	buf.Write([]byte{0xff, 't', 'O', 'c'})
	binary.Write(&buf, binary.BigEndian, uint32(2))
	var fan [256]uint32
	for _, e := range sorted {
		fan[e.oid[0]]++
	}
	var total uint32
	for i := range fan {
		total += fan[i]
		binary.Write(&buf, binary.BigEndian, total)
	}
	for i, e := range sorted {
		if i > 0 && bytes.Equal(sorted[i-1].oid, e.oid) {
			return nil, fmt.Errorf("%w: object %x twice in temp pack", ErrGit, e.oid)
		}
		buf.Write(e.oid)
	}
	for _, e := range sorted {
		binary.Write(&buf, binary.BigEndian, e.crc)
	}
	for _, e := range sorted {
		if e.off >= 1<<31 {
			return nil, fmt.Errorf("gitmerge: temp pack over 2 GiB")
		}
		binary.Write(&buf, binary.BigEndian, uint32(e.off))
	}
	buf.Write(packSum)
	h := newHash()
	h.Write(buf.Bytes())
	buf.Write(h.Sum(nil))
	return buf.Bytes(), nil
}
