package store

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Problem kinds reported by Check.
const (
	ProblemCorruptBlob       = "corrupt-blob"
	ProblemStrayObject       = "stray-object"
	ProblemCorruptTree       = "corrupt-tree"
	ProblemCorruptGeneration = "corrupt-generation"
	ProblemMissingTree       = "missing-tree"
	ProblemMissingBlob       = "missing-blob"
	ProblemMissingGeneration = "missing-generation"
	ProblemDanglingHead      = "dangling-head"
	ProblemDanglingParent    = "dangling-parent"
	ProblemBadHeadLog        = "bad-head-log"
	ProblemBadIndex          = "bad-index"
	ProblemBadFormat         = "bad-format"
	ProblemCorruptBaseRef    = "corrupt-baseref" // a base ref, resolution or base record that does not decode
	ProblemBadLinks          = "bad-links"       // a generation's link group that does not name one file's content
	ProblemMissingBase       = "missing-base"    // an unresolved reachable base ref whose base record is gone
)

// Problem is one integrity finding of Check.
type Problem struct {
	Kind   string `json:"kind"`   // one of the Problem* constants
	Object string `json:"object"` // the ID or name concerned
	Detail string `json:"detail"`
}

func (p Problem) String() string {
	return fmt.Sprintf("%s %s: %s", p.Kind, p.Object, p.Detail)
}

// reach is the set of objects reachable from the roots, with the first
// referrer of each blob for reporting. Base refs are leaves: their
// directories are never expanded, only their resolutions followed.
type reach struct {
	gens, trees, blobs IDSet
	refs, bases        IDSet
	blobFrom           map[ID]ID
	problems           []Problem
	hasRefs            bool // the baserefs bucket is not empty
}

func newReach(tx *bolt.Tx) *reach {
	k, _ := tx.Bucket(bucketBaseRefs).Cursor().First()
	return &reach{gens: IDSet{}, trees: IDSet{}, blobs: IDSet{}, refs: IDSet{}, bases: IDSet{},
		blobFrom: map[ID]ID{}, hasRefs: k != nil}
}

// markRef marks id if it is a recorded base ref, with its base and what
// its resolution names, and reports whether it was one.
func (r *reach) markRef(tx *bolt.Tx, id ID) bool {
	if r.refs.Has(id) {
		return true
	}
	if !r.hasRefs || tx.Bucket(bucketBaseRefs).Get(id[:]) == nil {
		return false
	}
	r.refs.Add(id)
	ref, _, err := storedRefTx(tx, id)
	if err != nil {
		r.problem(ProblemCorruptBaseRef, id.String(), "%v", err)
		return true
	}
	r.bases.Add(ref.Base)
	v := tx.Bucket(bucketBaseResolved).Get(id[:])
	switch {
	case v == nil:
		if tx.Bucket(bucketBases).Get(ref.Base[:]) == nil {
			r.problem(ProblemMissingBase, id.String(), "base %s of unresolved ref %q not recorded", ref.Base, ref.Path)
		}
	case len(v) != IDSize:
		r.problem(ProblemCorruptBaseRef, id.String(), "resolution of %d bytes", len(v))
	case ref.Kind == KindDir:
		r.markTree(tx, ID(v), "base ref "+id.String()+" resolution")
	default:
		if t := ID(v); !r.blobs.Has(t) {
			r.blobs.Add(t)
			r.blobFrom[t] = id
		}
	}
	return true
}

func (r *reach) problem(kind, obj, format string, args ...any) {
	r.problems = append(r.problems, Problem{Kind: kind, Object: obj, Detail: fmt.Sprintf(format, args...)})
}

// markGen marks generation id and everything its root reaches. from says
// who referenced it, for the report.
func (r *reach) markGen(tx *bolt.Tx, id ID, from string, missingKind string) {
	if id.IsZero() || r.gens.Has(id) {
		return
	}
	r.gens.Add(id)
	g, err := getGenerationTx(tx, id)
	switch {
	case errors.Is(err, ErrNotFound):
		r.problem(missingKind, id.String(), "referenced by %s", from)
		return
	case err != nil:
		r.problem(ProblemCorruptGeneration, id.String(), "%v", err)
		return
	}
	r.markTree(tx, g.Root, "generation "+id.String())
	if len(g.Links) > 0 {
		r.checkLinks(tx, id, g)
	}
	for _, c := range g.Conflicts {
		for _, sd := range c.Sides() {
			switch {
			case sd == nil, sd.Kind.IsSpecial():
			case sd.Kind == KindDir:
				r.markTree(tx, sd.ID, fmt.Sprintf("generation %s conflict %q", id, c.Path))
			case !r.blobs.Has(sd.ID) && !r.markRef(tx, sd.ID):
				r.blobs.Add(sd.ID)
				r.blobFrom[sd.ID] = id
			}
		}
	}
}

// checkLinks reports a link group of g whose paths are not all one
// regular file's content in g's root.
func (r *reach) checkLinks(tx *bolt.Tx, id ID, g *Generation) {
	entryAt := func(p string) (Entry, bool, error) {
		cur := g.Root
		names := strings.Split(p, "/")
		for i, name := range names {
			t, err := getTreeTx(tx, cur)
			if err != nil {
				return Entry{}, false, nil // reported by markTree
			}
			e, ok := t.Lookup(name)
			if !ok || i == len(names)-1 {
				return e, ok, nil
			}
			if e.Kind != KindDir {
				return Entry{}, false, nil
			}
			cur = e.ID
		}
		return Entry{}, false, nil
	}
	fit, _ := FitLinks(g.Links, entryAt)
	if !EqualLinks(fit, g.Links) {
		r.problem(ProblemBadLinks, id.String(), "link groups %q do not name one file each in its root (holding: %q)", g.Links, fit)
	}
}

func (r *reach) markTree(tx *bolt.Tx, id ID, from string) {
	if r.trees.Has(id) || r.markRef(tx, id) {
		return
	}
	r.trees.Add(id)
	t, err := getTreeTx(tx, id)
	switch {
	case errors.Is(err, ErrNotFound):
		r.problem(ProblemMissingTree, id.String(), "referenced by %s", from)
		return
	case err != nil:
		r.problem(ProblemCorruptTree, id.String(), "%v", err)
		return
	}
	for _, e := range t.Entries {
		if e.Kind == KindDir {
			r.markTree(tx, e.ID, "tree "+id.String()+" entry "+fmt.Sprintf("%q", e.Name))
			continue
		}
		if e.Kind.IsSpecial() {
			continue // no content
		}
		if !r.blobs.Has(e.ID) && !r.markRef(tx, e.ID) {
			r.blobs.Add(e.ID)
			r.blobFrom[e.ID] = id
		}
	}
}

// markRoots marks from every head-log entry and workspace record, plus
// extra (generation, tree or blob IDs), and checks the workspace records'
// own consistency.
func (s *Store) markRoots(tx *bolt.Tx, extra IDSet) *reach {
	r := newReach(tx)
	r.markTree(tx, emptyTreeID, "store")
	wsb := tx.Bucket(bucketWorkspaces)
	_ = wsb.ForEach(func(k, v []byte) error {
		name := string(k)
		var w Workspace
		if err := json.Unmarshal(v, &w); err != nil || w.Name != name {
			r.problem(ProblemBadHeadLog, name, "workspace record undecodable: %s", v)
			return nil
		}
		who := fmt.Sprintf("workspace %q", name)
		if !w.BaseRoot.IsZero() {
			r.bases.Add(w.BaseRoot)
		}
		r.markGen(tx, w.Head, who+" head", ProblemDanglingHead)
		r.markGen(tx, w.Base, who+" base", ProblemDanglingHead)
		if w.Parent != "" {
			if wsb.Get([]byte(w.Parent)) == nil {
				r.problem(ProblemDanglingParent, name, "parent %q does not exist", w.Parent)
			}
			if tx.Bucket(bucketChildren).Get(childKey(w.Parent, name)) == nil {
				r.problem(ProblemBadIndex, name, "missing from children index of %q", w.Parent)
			}
		}
		hb := tx.Bucket(bucketHeads).Bucket(k)
		if hb == nil {
			r.problem(ProblemBadHeadLog, name, "no head log")
			return nil
		}
		var last HeadEntry
		var prev uint64
		_ = hb.ForEach(func(hk, hv []byte) error {
			e, err := decodeHeadEntry(name, hk, hv)
			if err != nil {
				r.problem(ProblemBadHeadLog, name, "%v", err)
				return nil
			}
			if e.Seq != prev+1 {
				r.problem(ProblemBadHeadLog, name, "seq %d follows %d", e.Seq, prev)
			}
			prev = e.Seq
			last = e
			entry := fmt.Sprintf("%s head log entry %d", who, e.Seq)
			r.markGen(tx, e.Gen, entry, ProblemDanglingHead)
			r.markGen(tx, e.Base, entry+" base", ProblemDanglingHead)
			return nil
		})
		if last.Seq != w.Seq || last.Gen != w.Head {
			r.problem(ProblemBadHeadLog, name, "record says seq %d head %s, log ends at seq %d gen %s",
				w.Seq, shortOrNone(w.Head), last.Seq, shortOrNone(last.Gen))
		}
		if ob := tx.Bucket(bucketOperations).Bucket(k); ob != nil {
			_ = ob.ForEach(func(op, seq []byte) error {
				hv := hb.Get(seq)
				var e HeadEntry
				if hv == nil || json.Unmarshal(hv, &e) != nil || e.Operation != string(op) {
					r.problem(ProblemBadIndex, name, "operation %q indexes entry %x, which does not carry it", op, seq)
				}
				return nil
			})
		}
		return nil
	})
	_ = tx.Bucket(bucketChildren).ForEach(func(k, _ []byte) error {
		i := bytes.IndexByte(k, 0)
		if i < 0 {
			r.problem(ProblemBadIndex, string(k), "malformed children key")
			return nil
		}
		parent, child := string(k[:i]), string(k[i+1:])
		w, err := getWorkspaceTx(tx, child)
		if err != nil || w.Parent != parent {
			r.problem(ProblemBadIndex, child, "children index lists it under %q", parent)
		}
		return nil
	})
	for _, id := range extra.Sorted() {
		switch {
		case tx.Bucket(bucketGenerations).Get(id[:]) != nil:
			r.markGen(tx, id, "extra root", ProblemMissingGeneration)
		case id == emptyTreeID || tx.Bucket(bucketTrees).Get(id[:]) != nil:
			r.markTree(tx, id, "extra root")
		case r.markRef(tx, id):
		case tx.Bucket(bucketBases).Get(id[:]) != nil:
			r.bases.Add(id)
		default:
			r.blobs.Add(id)
		}
	}
	return r
}

// Check verifies the whole store: the format record, every blob file's
// content against its name, every tree and generation against its key, and
// that everything reachable from every workspace's head log exists. It
// reads every byte of every blob. Stray temp files are not problems. The
// error is for failures to run the check, not for findings.
func (s *Store) Check() ([]Problem, error) {
	var problems []Problem
	var r *reach
	err := s.view(func(tx *bolt.Tx) error {
		problems = append(problems, checkFormatTx(tx)...)
		problems = append(problems, checkBucketTx(tx, bucketTrees, TreeID, func(b []byte) error {
			_, err := DecodeTree(b)
			return err
		}, ProblemCorruptTree)...)
		problems = append(problems, checkBucketTx(tx, bucketGenerations, GenerationID, func(b []byte) error {
			_, err := DecodeGeneration(b)
			return err
		}, ProblemCorruptGeneration)...)
		problems = append(problems, checkBucketTx(tx, bucketBaseRefs, BaseRefID, func(b []byte) error {
			_, err := DecodeBaseRef(b)
			return err
		}, ProblemCorruptBaseRef)...)
		problems = append(problems, checkBaseRecordsTx(tx)...)
		r = s.markRoots(tx, nil)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("check: %w", err)
	}
	// Corrupt objects were already reported once by the key scan.
	for _, p := range r.problems {
		if p.Kind != ProblemCorruptTree && p.Kind != ProblemCorruptGeneration && p.Kind != ProblemCorruptBaseRef {
			problems = append(problems, p)
		}
	}
	present := IDSet{}
	err = s.walkObjects(func(id ID, path string, fi fs.FileInfo, nameErr error) error {
		if nameErr != nil {
			problems = append(problems, Problem{Kind: ProblemStrayObject, Object: path, Detail: nameErr.Error()})
			return nil
		}
		present.Add(id)
		if err := verifyBlobFile(path, id); err != nil {
			if !errors.Is(err, ErrCorrupt) {
				return err
			}
			problems = append(problems, Problem{Kind: ProblemCorruptBlob, Object: id.String(), Detail: err.Error()})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("check: %w", err)
	}
	for _, id := range r.blobs.Sorted() {
		if !present.Has(id) {
			problems = append(problems, Problem{Kind: ProblemMissingBlob, Object: id.String(),
				Detail: "referenced by tree " + r.blobFrom[id].String()})
		}
	}
	sortProblems(problems)
	return problems, nil
}

func checkFormatTx(tx *bolt.Tx) []Problem {
	v := tx.Bucket(bucketFormat).Get(keyFormat)
	var rec formatRecord
	if v == nil || json.Unmarshal(v, &rec) != nil || rec.Version != FormatVersion || rec.Hash != HashName {
		return []Problem{{Kind: ProblemBadFormat, Object: "format", Detail: fmt.Sprintf("format record %q", v)}}
	}
	return nil
}

func checkBucketTx(tx *bolt.Tx, bucket []byte, hash func([]byte) ID, decode func([]byte) error, kind string) []Problem {
	var out []Problem
	_ = tx.Bucket(bucket).ForEach(func(k, v []byte) error {
		obj := hex.EncodeToString(k)
		switch {
		case len(k) != IDSize:
			out = append(out, Problem{Kind: kind, Object: obj, Detail: "key is not an ID"})
		case hash(v) != ID(k):
			out = append(out, Problem{Kind: kind, Object: obj, Detail: "content hashes to " + hash(v).String()})
		default:
			if err := decode(v); err != nil {
				out = append(out, Problem{Kind: kind, Object: obj, Detail: err.Error()})
			}
		}
		return nil
	})
	return out
}

// checkBaseRecordsTx checks the bases and baseref-resolved buckets: base
// records decode to an absolute directory; each resolution is an ID and
// belongs to a recorded ref. It never reads a base directory.
func checkBaseRecordsTx(tx *bolt.Tx) []Problem {
	var out []Problem
	bad := func(k []byte, format string, args ...any) {
		out = append(out, Problem{Kind: ProblemCorruptBaseRef, Object: hex.EncodeToString(k), Detail: fmt.Sprintf(format, args...)})
	}
	_ = tx.Bucket(bucketBases).ForEach(func(k, v []byte) error {
		var rec baseRecord
		if len(k) != IDSize || json.Unmarshal(v, &rec) != nil || !filepath.IsAbs(rec.Dir) {
			bad(k, "base record %q", v)
		}
		return nil
	})
	refs := tx.Bucket(bucketBaseRefs)
	_ = tx.Bucket(bucketBaseResolved).ForEach(func(k, v []byte) error {
		switch {
		case len(k) != IDSize || len(v) != IDSize:
			bad(k, "resolution %x", v)
		case refs.Get(k) == nil:
			bad(k, "resolution of an unrecorded base ref")
		}
		return nil
	})
	return out
}

func verifyBlobFile(path string, id ID) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return verifyObject(f, id)
}

// walkObjects calls fn for every file under objects/, with the ID its path
// names or nameErr if the path is not an object name.
func (s *Store) walkObjects(fn func(id ID, path string, fi fs.FileInfo, nameErr error) error) error {
	fans, err := os.ReadDir(s.objectsDir())
	if err != nil {
		return err
	}
	for _, fan := range fans {
		fanPath := filepath.Join(s.objectsDir(), fan.Name())
		if !fan.IsDir() {
			fi, _ := fan.Info()
			if err := fn(ID{}, fanPath, fi, errors.New("not an object fan-out directory")); err != nil {
				return err
			}
			continue
		}
		ents, err := os.ReadDir(fanPath)
		if err != nil {
			return err
		}
		for _, e := range ents {
			p := filepath.Join(fanPath, e.Name())
			fi, err := e.Info()
			if errors.Is(err, fs.ErrNotExist) {
				continue // removed concurrently
			}
			if err != nil {
				return err
			}
			id, perr := ParseID(fan.Name() + e.Name())
			if perr == nil && !fi.Mode().IsRegular() {
				perr = errors.New("not a regular file")
			}
			if err := fn(id, p, fi, perr); err != nil {
				return err
			}
		}
	}
	return nil
}

// GC deletes every blob, tree and generation that no head-log entry of any
// workspace reaches (generation → root tree → subtrees → blobs), keeping
// extraRoots (generation, tree, blob, base ref or base IDs: journals, open
// windows) and what they reach. It returns the bytes of blob files removed.
//
// Base refs are leaves (their directories are never read): a kept ref
// keeps its resolution and what that names, and its base record; a base
// record is also kept while a workspace's BaseRoot names it. Unreachable
// refs, resolutions and base records are deleted.
//
// GC waits until no HoldGC hold is outstanding and blocks new holds (and
// blob writes) while it runs; metadata is marked and swept in one
// transaction. An operation that writes objects without holding HoldGC
// until its head append can lose them to a concurrent GC. GC refuses to
// run on a store whose reachable metadata is corrupt.
func (s *Store) GC(extraRoots IDSet) (int64, error) {
	if s.readOnly {
		return 0, fmt.Errorf("gc: %w", ErrReadOnly)
	}
	s.beginGC()
	defer s.endGC()
	defer s.trees.reset()        // swept trees must read as missing
	defer s.bases.forgetStored() // swept refs must be stored again when named
	start := time.Now()
	var r *reach
	err := s.update(func(tx *bolt.Tx) error {
		r = s.markRoots(tx, extraRoots)
		for _, p := range r.problems {
			if p.Kind == ProblemCorruptTree || p.Kind == ProblemCorruptGeneration || p.Kind == ProblemCorruptBaseRef {
				return fmt.Errorf("%w: %s (run check)", ErrCorrupt, p)
			}
		}
		if err := fail("gc.before-sweep"); err != nil {
			return err
		}
		for _, sb := range []struct {
			bucket []byte
			keep   IDSet
		}{
			{bucketTrees, r.trees}, {bucketGenerations, r.gens},
			{bucketBaseRefs, r.refs}, {bucketBaseResolved, r.refs}, {bucketBases, r.bases},
		} {
			b := tx.Bucket(sb.bucket)
			var dead [][]byte
			_ = b.ForEach(func(k, _ []byte) error {
				if len(k) != IDSize || !sb.keep.Has(ID(k)) {
					dead = append(dead, append([]byte{}, k...))
				}
				return nil
			})
			for _, k := range dead {
				if err := b.Delete(k); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("gc: %w", err)
	}
	var freed int64
	var removeErrs []error
	err = s.walkObjects(func(id ID, path string, fi fs.FileInfo, nameErr error) error {
		if nameErr != nil || r.blobs.Has(id) || !storedAt(fi).Before(start) {
			return nil
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			removeErrs = append(removeErrs, err)
			return nil
		}
		freed += fi.Size()
		return nil
	})
	if err == nil {
		err = errors.Join(removeErrs...)
	}
	if err != nil {
		return freed, fmt.Errorf("gc: sweep blobs: %w", err)
	}
	return freed, nil
}

// sortProblems orders findings for stable output.
func sortProblems(ps []Problem) {
	sort.Slice(ps, func(i, j int) bool {
		if ps[i].Kind != ps[j].Kind {
			return ps[i].Kind < ps[j].Kind
		}
		return ps[i].Object < ps[j].Object
	})
}
