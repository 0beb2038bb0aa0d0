package workspace

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/acyclicfs/acyclicfs/store"
)

// oidCache maps store objects to git object names, so that publishing
// hashes only what changed: a store blob ID to its git blob, and a
// directory — keyed by its path, its store tree ID, the ignore rules in
// effect above it and the git tree of what is tracked there — to the git
// tree it becomes. It lives in memory and in STORE/git-oids-FORMAT
// (docs/format.md "git object-name cache"). A name in it is only a hint:
// publish checks the commit it makes is connected in REPO and rebuilds
// without the cache when it is not.
type oidCache struct {
	mu     sync.Mutex
	loaded map[string]bool                 // by object format
	m      map[string]map[[32]byte]oidSlot // by object format
	dirty  map[string]bool
}

// oidSlot is one cached name; empty marks a directory with nothing to
// publish (all ignored or empty).
type oidSlot struct {
	oid   string
	empty bool
}

// oidCacheMax bounds the cache; past it the file starts over.
const oidCacheMax = 1 << 21

const oidCacheMagic = "acyclicfs-git-oids 1\n"

func (m *gitNative) oidCachePath(format string) string {
	return filepath.Join(m.dir, "git-oids-"+format)
}

// oidTable returns the cache for format, loading it from its file once.
// Callers hold c.mu.
func (m *gitNative) oidTable(format string) map[[32]byte]oidSlot {
	c := &m.oids
	if c.m == nil {
		c.m, c.loaded, c.dirty = map[string]map[[32]byte]oidSlot{}, map[string]bool{}, map[string]bool{}
	}
	if !c.loaded[format] {
		c.loaded[format] = true
		c.m[format] = loadOIDCache(m.oidCachePath(format), format)
	}
	return c.m[format]
}

func hashLenOf(format string) int {
	if format == "sha256" {
		return 32
	}
	return 20
}

// loadOIDCache reads a cache file; anything unreadable is an empty cache
// (the file is only a hint).
func loadOIDCache(p, format string) map[[32]byte]oidSlot {
	out := map[[32]byte]oidSlot{}
	data, err := os.ReadFile(p)
	if err != nil || !bytes.HasPrefix(data, []byte(oidCacheMagic)) || len(data) < len(oidCacheMagic)+sha256.Size {
		return out
	}
	body, sum := data[:len(data)-sha256.Size], data[len(data)-sha256.Size:]
	if got := sha256.Sum256(body); !bytes.Equal(got[:], sum) {
		return out // damaged: start over
	}
	data = body[len(oidCacheMagic):]
	rec := 32 + 1 + hashLenOf(format)
	for len(data) >= rec {
		var k [32]byte
		copy(k[:], data[:32])
		s := oidSlot{empty: data[32] == 1}
		if !s.empty {
			s.oid = hex.EncodeToString(data[33:rec])
		}
		out[k] = s
		data = data[rec:]
	}
	return out
}

// saveOIDCache writes the cache of format if it changed (temp + rename).
func (m *gitNative) saveOIDCache(format string) error {
	c := &m.oids
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.dirty[format] {
		return nil
	}
	t := m.oidTable(format)
	hl := hashLenOf(format)
	buf := make([]byte, 0, len(oidCacheMagic)+len(t)*(33+hl))
	buf = append(buf, oidCacheMagic...)
	for k, s := range t {
		buf = append(buf, k[:]...)
		if s.empty {
			buf = append(buf, 1)
			buf = append(buf, make([]byte, hl)...)
			continue
		}
		raw, err := hex.DecodeString(s.oid)
		if err != nil || len(raw) != hl {
			continue
		}
		buf = append(append(buf, 0), raw...)
	}
	sum := sha256.Sum256(buf)
	buf = append(buf, sum[:]...)
	p := m.oidCachePath(format)
	f, err := os.CreateTemp(filepath.Join(m.dir, "tmp"), "git-oids-"+format+"-")
	if err != nil {
		return fmt.Errorf("write the git object-name cache: %w", err)
	}
	_, err = f.Write(buf)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), p)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("write the git object-name cache: %w", err)
	}
	c.dirty[format] = false
	return nil
}

// pubTrees turns store trees into git trees in REPO.
type pubTrees struct {
	m       *gitNative
	g       *gitRepo
	format  string
	cat     *catFile
	noCache bool

	local map[[32]byte]oidSlot // what this publish computed
	// pending are objects this publish named that REPO may lack.
	pending     []pendingObj
	pendingSeen map[string]bool
	tmp         string // temp dir for trees and base-ref blobs
}

type pendingObj struct {
	oid  string
	tree []byte   // a tree's content, or nil for a blob
	blob store.ID // a blob's store ID
}

func (m *gitNative) newPubTrees(g *gitRepo, format string) (*pubTrees, error) {
	if format != "sha1" && format != "sha256" {
		return nil, fmt.Errorf("%w: object format %q", ErrInvalidInput, format)
	}
	cat, err := g.catFile("--batch")
	if err != nil {
		return nil, err
	}
	return &pubTrees{m: m, g: g, format: format, cat: cat, local: map[[32]byte]oidSlot{}, pendingSeen: map[string]bool{}}, nil
}

func (tb *pubTrees) close() {
	tb.cat.close()
	if tb.tmp != "" {
		os.RemoveAll(tb.tmp)
	}
	if err := tb.m.saveOIDCache(tb.format); err != nil {
		tb.m.opt.Warn(err.Error())
	}
}

// forget drops the cache (memory and file) and what this build computed.
func (tb *pubTrees) forget() {
	c := &tb.m.oids
	c.mu.Lock()
	tb.m.oidTable(tb.format)
	c.m[tb.format] = map[[32]byte]oidSlot{}
	c.dirty[tb.format] = true
	c.mu.Unlock()
	tb.local = map[[32]byte]oidSlot{}
	tb.pending, tb.pendingSeen = nil, map[string]bool{}
	tb.noCache = true
}

func (tb *pubTrees) lookup(k [32]byte) (oidSlot, bool) {
	if s, ok := tb.local[k]; ok {
		return s, true
	}
	if tb.noCache {
		return oidSlot{}, false
	}
	c := &tb.m.oids
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := tb.m.oidTable(tb.format)[k]
	return s, ok
}

func (tb *pubTrees) remember(k [32]byte, s oidSlot) {
	tb.local[k] = s
	c := &tb.m.oids
	c.mu.Lock()
	defer c.mu.Unlock()
	t := tb.m.oidTable(tb.format)
	if len(t) >= oidCacheMax {
		t = map[[32]byte]oidSlot{}
		c.m[tb.format] = t
	}
	t[k] = s
	c.dirty[tb.format] = true
}

func (tb *pubTrees) newHash() hash.Hash {
	if tb.format == "sha256" {
		return sha256.New()
	}
	return sha1.New()
}

// objectName is git's name of an object of type typ holding data.
func (tb *pubTrees) objectName(typ string, data []byte) string {
	h := tb.newHash()
	fmt.Fprintf(h, "%s %d\x00", typ, len(data))
	h.Write(data)
	return hex.EncodeToString(h.Sum(nil))
}

// blobKey is a store blob's cache key: its ID (blob content).
func blobKey(id store.ID) [32]byte { return [32]byte(id) }

// dirKey is a directory's cache key.
func dirKey(rel string, id store.ID, fp [32]byte, tracked string, allIgnored bool) [32]byte {
	h := sha256.New()
	h.Write([]byte("dir\x00"))
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(rel)))
	h.Write(n[:])
	h.Write([]byte(rel))
	h.Write(id[:])
	h.Write(fp[:])
	h.Write([]byte(tracked))
	if allIgnored {
		h.Write([]byte{1})
	}
	return [32]byte(h.Sum(nil))
}

// blob returns the git name of the store blob id, hashing it on a miss.
func (tb *pubTrees) blob(id store.ID) (string, error) {
	k := blobKey(id)
	if s, ok := tb.lookup(k); ok && !s.empty {
		tb.want(pendingObj{oid: s.oid, blob: id}, false)
		return s.oid, nil
	}
	// A git object reference (create --from-git) carries its name; REPO
	// is asked for it like for any freshly computed name.
	oid := ""
	if r, ok, err := tb.m.st.BaseRefOf(id); err != nil {
		return "", err
	} else if ok && r.Git != "" && tb.format == "sha1" { // git object refs are SHA-1 names
		oid = r.Git
	} else if oid, err = tb.hashBlob(id); err != nil {
		return "", err
	}
	tb.remember(k, oidSlot{oid: oid})
	tb.want(pendingObj{oid: oid, blob: id}, true)
	return oid, nil
}

// hashBlob returns the git name of the store blob id's content, streamed
// (a large file is never held in memory whole).
func (tb *pubTrees) hashBlob(id store.ID) (string, error) {
	size, err := tb.m.st.BlobSize(id)
	if err != nil {
		return "", err
	}
	r, err := tb.m.st.OpenBlob(id)
	if err != nil {
		return "", err
	}
	defer r.Close()
	h := tb.newHash()
	fmt.Fprintf(h, "blob %d\x00", size)
	n, err := io.Copy(h, r)
	if err != nil {
		return "", err
	}
	if n != size {
		return "", fmt.Errorf("blob %s: read %d bytes, its size is %d", id.Short(), n, size)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// want notes an object REPO must hold; only freshly computed names are
// checked (cached ones are covered by the connectivity check).
func (tb *pubTrees) want(o pendingObj, fresh bool) {
	if !fresh || tb.pendingSeen[o.oid] {
		return
	}
	tb.pendingSeen[o.oid] = true
	tb.pending = append(tb.pending, o)
}

// gitEntry is one entry of a git tree.
type gitEntry struct {
	mode string
	name string
	oid  string
}

// readGitTree lists the git tree oid.
func (tb *pubTrees) readGitTree(oid string) (map[string]gitEntry, error) {
	out := map[string]gitEntry{}
	if oid == "" {
		return out, nil
	}
	typ, data, err := tb.cat.read(oid)
	if err != nil {
		return nil, err
	}
	if typ != "tree" {
		return nil, fmt.Errorf("git object %s is a %s, not a tree", oid, typ)
	}
	ents, err := parseGitTree(data, hashLenOf(tb.format))
	if err != nil {
		return nil, fmt.Errorf("git tree %s: %w", oid, err)
	}
	for _, e := range ents {
		out[e.name] = e
	}
	return out, nil
}

// parseGitTree decodes a git tree object's content: entries of
// "<mode> <name>\0<raw name of hashLen bytes>".
func parseGitTree(data []byte, hashLen int) ([]gitEntry, error) {
	var out []gitEntry
	for len(data) > 0 {
		sp := bytes.IndexByte(data, ' ')
		nul := bytes.IndexByte(data, 0)
		if sp <= 0 || nul < sp+2 || len(data) < nul+1+hashLen {
			return nil, fmt.Errorf("%w: malformed git tree", ErrInvalidInput)
		}
		out = append(out, gitEntry{mode: string(data[:sp]), name: string(data[sp+1 : nul]), oid: hex.EncodeToString(data[nul+1 : nul+1+hashLen])})
		data = data[nul+1+hashLen:]
	}
	return out, nil
}

// dir returns the git tree of the store tree id at rel ("" for the top),
// "" when nothing in it is published. sets are the ignore rules in effect
// (fp their fingerprint); tracked is the git tree of the tracked commit at
// rel ("" if none); allIgnored marks a directory an ignore rule excludes,
// where only tracked paths are kept.
func (tb *pubTrees) dir(id store.ID, rel string, sets []ignoreSet, fp [32]byte, tracked string, allIgnored bool) (string, error) {
	k := dirKey(rel, id, fp, tracked, allIgnored)
	if s, ok := tb.lookup(k); ok {
		return s.oid, nil
	}
	t, err := tb.m.st.GetTree(id)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", displayDir(rel), err)
	}
	if gi, ok := t.Lookup(".gitignore"); ok && gi.Kind.IsRegular() {
		data, err := tb.m.st.ReadBlob(gi.ID)
		if err != nil {
			return "", fmt.Errorf("read %s: %w", joinRel(rel, ".gitignore"), err)
		}
		sets = append(sets[:len(sets):len(sets)], ignoreSet{base: rel, rules: parseIgnore(data)})
		h := sha256.New()
		h.Write(fp[:])
		h.Write([]byte(rel + "\x00"))
		h.Write(gi.ID[:])
		fp = [32]byte(h.Sum(nil))
	}
	tr, err := tb.readGitTree(tracked)
	if err != nil {
		return "", fmt.Errorf("read the tracked tree of %s: %w", displayDir(rel), err)
	}
	var ents []gitEntry
	for _, e := range t.Entries {
		if e.Name == ".git" {
			continue // the repository itself; nested repositories are not published
		}
		if e.Kind.IsSpecial() {
			continue // FIFOs, sockets, devices: git records none
		}
		p := joinRel(rel, e.Name)
		te, isTracked := tr[e.Name]
		if isTracked && te.mode == "160000" {
			ents = append(ents, te) // a submodule: kept as it is
			continue
		}
		if e.Kind == store.KindDir {
			sub := ""
			if isTracked && te.mode == "40000" {
				sub = te.oid
			}
			ign := allIgnored || ignored(sets, p, true)
			if ign && sub == "" {
				continue
			}
			oid, err := tb.dir(e.ID, p, sets, fp, sub, ign)
			if err != nil {
				return "", err
			}
			if oid != "" {
				ents = append(ents, gitEntry{mode: "40000", name: e.Name, oid: oid})
			}
			continue
		}
		if !isTracked && (allIgnored || ignored(sets, p, false)) {
			continue
		}
		mode := "100644"
		switch e.Kind {
		case store.KindExec:
			mode = "100755"
		case store.KindSymlink:
			mode = "120000"
		}
		oid, err := tb.blob(e.ID)
		if err != nil {
			return "", fmt.Errorf("read %s: %w", p, err)
		}
		ents = append(ents, gitEntry{mode: mode, name: e.Name, oid: oid})
	}
	if len(ents) == 0 {
		tb.remember(k, oidSlot{empty: true})
		return "", nil
	}
	data := encodeGitTree(ents)
	oid := tb.objectName("tree", data)
	tb.remember(k, oidSlot{oid: oid})
	tb.want(pendingObj{oid: oid, tree: data}, true)
	return oid, nil
}

// encodeGitTree sorts ents as git does (a directory as if its name ended
// in '/') and encodes them.
func encodeGitTree(ents []gitEntry) []byte {
	key := func(e gitEntry) string {
		if e.mode == "40000" {
			return e.name + "/"
		}
		return e.name
	}
	sort.Slice(ents, func(i, j int) bool { return key(ents[i]) < key(ents[j]) })
	var b bytes.Buffer
	for _, e := range ents {
		raw, _ := hex.DecodeString(e.oid)
		b.WriteString(e.mode + " " + e.name + "\x00")
		b.Write(raw)
	}
	return b.Bytes()
}

// emptyTree writes git's empty tree and returns its name.
func (tb *pubTrees) emptyTree() (string, error) {
	return tb.g.line("hash-object", "-w", "-t", "tree", "/dev/null")
}

// flush writes the objects this build named that REPO lacks: blobs with
// `git hash-object -w --no-filters --stdin-paths` (from the store's blob
// files), trees with `git hash-object -w -t tree --stdin-paths`. git
// checks each name against ours.
func (tb *pubTrees) flush() error {
	if len(tb.pending) == 0 {
		return nil
	}
	missing, err := tb.missing(tb.pending)
	if err != nil {
		return err
	}
	tb.pending, tb.pendingSeen = nil, map[string]bool{}
	var blobs, trees []pendingObj
	for _, o := range missing {
		if o.tree != nil {
			trees = append(trees, o)
		} else {
			blobs = append(blobs, o)
		}
	}
	if tb.tmp == "" && len(missing) > 0 {
		if tb.tmp, err = os.MkdirTemp(filepath.Join(tb.m.dir, "tmp"), "publish-"); err != nil {
			return fmt.Errorf("temp dir: %w", err)
		}
	}
	// Blobs before the trees that name them.
	if err := tb.write(blobs, false); err != nil {
		return err
	}
	return tb.write(trees, true)
}

func (tb *pubTrees) write(objs []pendingObj, trees bool) error {
	if len(objs) == 0 {
		return nil
	}
	var paths strings.Builder
	for i, o := range objs {
		p := ""
		if trees {
			p = filepath.Join(tb.tmp, fmt.Sprintf("tree-%d", i))
			if err := os.WriteFile(p, o.tree, 0o600); err != nil {
				return fmt.Errorf("write tree: %w", err)
			}
		} else {
			p = tb.m.st.BlobPath(o.blob)
			if fi, err := os.Lstat(p); err != nil || !fi.Mode().IsRegular() {
				// Content of an in-place workspace's base: copy it out.
				p = filepath.Join(tb.tmp, fmt.Sprintf("blob-%d", i))
				if err := tb.m.copyBlobTo(o.blob, p, 0o600, false); err != nil {
					return err
				}
			}
		}
		if strings.ContainsAny(p, "\n") {
			return fmt.Errorf("%w: a path with a newline: %q", ErrInvalidInput, p)
		}
		paths.WriteString(p + "\n")
	}
	args := []string{"hash-object", "-w", "--no-filters", "--stdin-paths"}
	if trees {
		args = []string{"hash-object", "-w", "-t", "tree", "--stdin-paths"}
	}
	out, err := tb.g.run([]byte(paths.String()), args...)
	if err != nil {
		return err
	}
	got := strings.Fields(string(out))
	if len(got) != len(objs) {
		return fmt.Errorf("git hash-object wrote %d objects, want %d", len(got), len(objs))
	}
	for i, o := range objs {
		if got[i] != o.oid {
			return fmt.Errorf("git names an object %s, publish computed %s", got[i], o.oid)
		}
	}
	return nil
}

// missing returns the objects of objs REPO does not have.
func (tb *pubTrees) missing(objs []pendingObj) ([]pendingObj, error) {
	check, err := tb.g.catFile("--batch-check")
	if err != nil {
		return nil, err
	}
	defer check.close()
	errc := make(chan error, 1)
	go func() {
		for _, o := range objs {
			if _, err := check.in.WriteString(o.oid + "\n"); err != nil {
				errc <- err
				return
			}
		}
		errc <- check.in.Flush()
		check.w.Close()
	}()
	var out []pendingObj
	r := bufio.NewReader(check.out)
	for _, o := range objs {
		line, err := r.ReadString('\n')
		if err != nil {
			return nil, fmt.Errorf("git cat-file --batch-check: %w", err)
		}
		if strings.HasSuffix(strings.TrimSpace(line), " missing") {
			out = append(out, o)
		}
	}
	if err := <-errc; err != nil && !errors.Is(err, io.ErrClosedPipe) {
		return nil, fmt.Errorf("git cat-file --batch-check: %w", err)
	}
	return out, nil
}

// rememberGitBlobs fills the object-name cache with blobs an import read
// from a repository (git name → store ID), so that publishing the
// imported files hashes none of them.
// knownGitBlobs returns the store IDs of the blobs in oids that the
// object-name cache names and the store holds: an import need not read
// them. The cache is a hint; the store's answer is what counts.
func (m *gitNative) knownGitBlobs(oids []string) map[string]store.ID {
	known := make(map[string]store.ID, len(oids))
	if len(oids) == 0 {
		return known
	}
	format := "sha1"
	if len(oids[0]) == 64 {
		format = "sha256"
	}
	want := make(map[string]bool, len(oids))
	for _, o := range oids {
		want[o] = true
	}
	c := &m.oids
	c.mu.Lock()
	for k, slot := range m.oidTable(format) {
		if want[slot.oid] {
			known[slot.oid] = store.ID(k)
		}
	}
	c.mu.Unlock()
	for oid, id := range known {
		if have, err := m.st.HasBlob(id); err != nil || !have {
			delete(known, oid)
		}
	}
	return known
}

func (m *gitNative) rememberGitBlobs(_ string, ids map[string]store.ID) {
	formats := map[string]bool{}
	c := &m.oids
	c.mu.Lock()
	for oid, id := range ids {
		format := "sha1"
		if len(oid) == 64 {
			format = "sha256"
		}
		t := m.oidTable(format)
		if len(t) >= oidCacheMax {
			continue
		}
		t[blobKey(id)] = oidSlot{oid: oid}
		c.dirty[format], formats[format] = true, true
	}
	c.mu.Unlock()
	for f := range formats {
		if err := m.saveOIDCache(f); err != nil {
			m.opt.Warn(err.Error())
		}
	}
}
