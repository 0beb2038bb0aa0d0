package store

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/acyclicfs/acyclicfs/meta"

	"github.com/acyclicfs/acyclicfs/blobs"
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
	ProblemCorruptBaseRef    = "corrupt-baseref"    // a base ref, resolution or base record that does not decode
	ProblemBadLinks          = "bad-links"          // a generation's link group that does not name one file's content
	ProblemMissingBase       = "missing-base"       // an unresolved reachable base ref whose base record is gone
	ProblemMissingGitObject  = "missing-git-object" // an unresolved reachable git object ref whose repository lacks the object
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
	// gitRefs are the reachable unresolved git object refs, by base.
	gitRefs map[ID]map[ID]BaseRef
}

func newReach(tx *stx) *reach {
	hasRefs := false
	_ = tx.Scan(prefixBaseRefs, meta.ScanOptions{Limit: 1}, func(meta.Key, []byte) error {
		hasRefs = true
		return nil
	})
	return &reach{gens: IDSet{}, trees: IDSet{}, blobs: IDSet{}, refs: IDSet{}, bases: IDSet{},
		blobFrom: map[ID]ID{}, hasRefs: hasRefs}
}

// hasRecord reports whether record id is in prefix's namespace; a failed read
// counts as absent (the walks report what they cannot read as missing).
func hasRecord(tx *stx, prefix meta.Key, id []byte) bool {
	ok, err := tx.has(prefix, id)
	return err == nil && ok
}

// markRef marks id if it is a recorded base ref, with its base and what
// its resolution names, and reports whether it was one.
func (r *reach) markRef(tx *stx, id ID) bool {
	if r.refs.Has(id) {
		return true
	}
	if !r.hasRefs || !hasRecord(tx, prefixBaseRefs, id[:]) {
		return false
	}
	r.refs.Add(id)
	ref, _, err := storedRefTx(tx, id)
	if err != nil {
		r.problem(ProblemCorruptBaseRef, id.String(), "%v", err)
		return true
	}
	r.bases.Add(ref.Base)
	v, _ := tx.get(prefixBaseResolved, id[:])
	switch {
	case v == nil:
		if !hasRecord(tx, prefixBases, ref.Base[:]) {
			r.problem(ProblemMissingBase, id.String(), "base %s of unresolved ref %q not recorded", ref.Base, ref.Path)
		} else if ref.Git != "" {
			if r.gitRefs == nil {
				r.gitRefs = map[ID]map[ID]BaseRef{}
			}
			if r.gitRefs[ref.Base] == nil {
				r.gitRefs[ref.Base] = map[ID]BaseRef{}
			}
			r.gitRefs[ref.Base][id] = ref
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
func (r *reach) markGen(tx *stx, id ID, from string, missingKind string) {
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
func (r *reach) checkLinks(tx *stx, id ID, g *Generation) {
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

func (r *reach) markTree(tx *stx, id ID, from string) {
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
func (s *Store) markRoots(tx *stx, extra IDSet) *reach {
	r := newReach(tx)
	r.markTree(tx, emptyTreeID, "store")
	markWorkspaces(tx, r)
	for _, id := range extra.Sorted() {
		switch {
		case hasRecord(tx, prefixGenerations, id[:]):
			r.markGen(tx, id, "extra root", ProblemMissingGeneration)
		case id == emptyTreeID || hasRecord(tx, prefixTrees, id[:]):
			r.markTree(tx, id, "extra root")
		case r.markRef(tx, id):
		case hasRecord(tx, prefixBases, id[:]):
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
	err := s.view(func(tx *stx) error {
		problems = append(problems, checkFormatTx(tx)...)
		problems = append(problems, checkBucketTx(tx, spaceTrees, TreeID, func(b []byte) error {
			_, err := DecodeTree(b)
			return err
		}, ProblemCorruptTree)...)
		problems = append(problems, checkBucketTx(tx, spaceGenerations, GenerationID, func(b []byte) error {
			_, err := DecodeGeneration(b)
			return err
		}, ProblemCorruptGeneration)...)
		problems = append(problems, checkBucketTx(tx, spaceBaseRefs, BaseRefID, func(b []byte) error {
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
	if s.tier != nil {
		missing, err := s.checkRemote(r)
		if err != nil {
			return nil, fmt.Errorf("check: %w", err)
		}
		problems = append(problems, missing...)
	} else {
		for _, id := range r.blobs.Sorted() {
			if !present.Has(id) {
				problems = append(problems, Problem{Kind: ProblemMissingBlob, Object: id.String(),
					Detail: "referenced by tree " + r.blobFrom[id].String()})
			}
		}
	}
	gp, err := s.checkGitRefs(r.gitRefs)
	if err != nil {
		return nil, fmt.Errorf("check: %w", err)
	}
	problems = append(problems, gp...)
	sortProblems(problems)
	return problems, nil
}

func checkFormatTx(tx *stx) []Problem {
	v, _ := tx.get(prefixFormat, keyFormat)
	var rec formatRecord
	if v == nil || json.Unmarshal(v, &rec) != nil || rec.Version != FormatVersion || rec.Hash != HashName {
		return []Problem{{Kind: ProblemBadFormat, Object: "format", Detail: fmt.Sprintf("format record %q", v)}}
	}
	return nil
}

// checkBucketTx checks every record of the content-addressed namespace sp
// against its key.
func checkBucketTx(tx *stx, sp meta.Space, hash func([]byte) ID, decode func([]byte) error, kind string) []Problem {
	var out []Problem
	_ = tx.Scan(sp.Prefix(nil), meta.ScanOptions{}, func(mk meta.Key, v []byte) error {
		k := sp.Leaf(mk)
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
func checkBaseRecordsTx(tx *stx) []Problem {
	var out []Problem
	bad := func(k []byte, format string, args ...any) {
		out = append(out, Problem{Kind: ProblemCorruptBaseRef, Object: hex.EncodeToString(k), Detail: fmt.Sprintf(format, args...)})
	}
	_ = tx.Scan(prefixBases, meta.ScanOptions{}, func(mk meta.Key, v []byte) error {
		k := spaceBases.Leaf(mk)
		var rec baseRecord
		if len(k) != IDSize || json.Unmarshal(v, &rec) != nil || !filepath.IsAbs(rec.Dir) {
			bad(k, "base record %q", v)
		}
		return nil
	})
	_ = tx.Scan(prefixBaseResolved, meta.ScanOptions{}, func(mk meta.Key, v []byte) error {
		k := spaceBaseResolved.Leaf(mk)
		switch {
		case len(k) != IDSize || len(v) != IDSize:
			bad(k, "resolution %x", v)
		case !hasRecord(tx, prefixBaseRefs, k):
			bad(k, "resolution of an unrecorded base ref")
		}
		return nil
	})
	return out
}

// checkRemoteConcurrency bounds the remote Stats of checkRemote in flight.
const checkRemoteConcurrency = 16

// checkRemote asks the remote for every reachable blob (the local
// objects/ is only a cache) and reports those it does not hold. A remote
// that fails is an error (the check could not run), not a finding.
func (s *Store) checkRemote(r *reach) ([]Problem, error) {
	remote := s.tier.Remote()
	ids := r.blobs.Sorted()
	missing := make([]bool, len(ids))
	var g errgroup.Group
	g.SetLimit(checkRemoteConcurrency)
	for i, id := range ids {
		g.Go(func() error {
			_, err := remote.Stat(bid(id))
			switch {
			case errors.Is(err, ErrNotFound):
				missing[i] = true
			case err != nil:
				return fmt.Errorf("remote blob %s: %w: %w", id.Short(), blobs.ErrUnavailable, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	var out []Problem
	for i, id := range ids {
		if missing[i] {
			out = append(out, Problem{Kind: ProblemMissingBlob, Object: id.String(),
				Detail: "not in the remote; referenced by tree " + r.blobFrom[id].String()})
		}
	}
	return out, nil
}

func verifyBlobFile(path string, id ID) error { return blobs.VerifyFile(path, bid(id)) }

// walkObjects calls fn for every file under objects/, with the ID its path
// names or nameErr if the path is not an object name.
func (s *Store) walkObjects(fn func(id ID, path string, fi fs.FileInfo, nameErr error) error) error {
	return s.objs.Walk(func(id blobs.ID, path string, fi fs.FileInfo, nameErr error) error {
		return fn(ID(id), path, fi, nameErr)
	})
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
//
// With a Remote, the local cache loses what is unreachable, the remote
// what is unreachable and older than the grace period (sweepRemote), and
// the bytes returned are the remote's.
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
	err := s.update(func(tx *stx) error {
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
			space meta.Space
			keep  IDSet
		}{
			{spaceTrees, r.trees}, {spaceGenerations, r.gens},
			{spaceBaseRefs, r.refs}, {spaceBaseResolved, r.refs}, {spaceBases, r.bases},
		} {
			var dead []meta.Key
			err := tx.Scan(sb.space.Prefix(nil), meta.ScanOptions{}, func(mk meta.Key, _ []byte) error {
				if k := sb.space.Leaf(mk); len(k) != IDSize || !sb.keep.Has(ID(k)) {
					dead = append(dead, append(meta.Key{}, mk...))
				}
				return nil
			})
			if err != nil {
				return err
			}
			for _, k := range dead {
				if err := tx.Delete(k); err != nil {
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
	err = s.objs.List(func(in blobs.Info) error {
		if r.blobs.Has(ID(in.ID)) || !in.ModTime.Before(start) {
			return nil
		}
		if err := s.objs.Delete(in.ID); err != nil {
			removeErrs = append(removeErrs, err)
			return nil
		}
		if s.tier != nil {
			s.tier.Forget(in.ID)
		}
		freed += in.Size
		return nil
	})
	if err == nil {
		err = errors.Join(removeErrs...)
	}
	if err != nil {
		return freed, fmt.Errorf("gc: sweep blobs: %w", err)
	}
	if s.tier != nil {
		// The remote is where objects are kept; the local files were a
		// cache. What GC frees is what it deleted there.
		n, err := s.sweepRemote(r.blobs)
		freed = n
		if err != nil {
			return freed, fmt.Errorf("gc: sweep remote blobs: %w", err)
		}
	}
	return freed, nil
}

// sweepRemote deletes from the remote every object that r does not reach
// and that was stored (uploaded, or last found present by an upload that
// touched it) more than the grace period before the sweep: another node's
// capture uploads its objects before it publishes the head naming them,
// and this node's marks cannot see that head yet. Stored times are the
// remote's clock, compared with the store clock (Options.Clock). An object whose stored
// time the remote does not know is kept. Each candidate is asked for
// again just before its delete, so an upload that touched it during the
// sweep keeps it. Returns the bytes deleted.
func (s *Store) sweepRemote(reached IDSet) (int64, error) {
	remote := s.tier.Remote()
	cutoff := time.UnixMilli(s.clock()).Add(-s.gcGrace)
	var dead []blobs.Info
	err := remote.List(func(in blobs.Info) error {
		if !reached.Has(ID(in.ID)) && !in.ModTime.IsZero() && in.ModTime.Before(cutoff) {
			dead = append(dead, in)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	var freed int64
	var errs []error
	for _, in := range dead {
		now, err := remote.Stat(in.ID)
		switch {
		case errors.Is(err, ErrNotFound):
			continue
		case err != nil:
			errs = append(errs, err)
			continue
		case now.ModTime.IsZero() || !now.ModTime.Before(cutoff):
			continue
		}
		if err := remote.Delete(in.ID); err != nil {
			errs = append(errs, err)
			continue
		}
		s.tier.ForgetRemote(in.ID)
		freed += in.Size
	}
	return freed, errors.Join(errs...)
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

// markWorkspaces marks from every workspace record and head-log entry (the
// metadata plane's namespaces) and checks the records, head logs,
// operation index and children index against each other.
func markWorkspaces(tx *stx, r *reach) {
	_ = tx.Scan(spaceWorkspaces.Prefix(nil), meta.ScanOptions{}, func(k meta.Key, v []byte) error {
		name := string(spaceWorkspaces.Leaf(k))
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
			if _, ok, _ := tx.Get(spaceWorkspaces.Key([]byte(w.Parent))); !ok {
				r.problem(ProblemDanglingParent, name, "parent %q does not exist", w.Parent)
			}
			if _, ok, _ := tx.Get(spaceChildren.Key(childKey(w.Parent, name))); !ok {
				r.problem(ProblemBadIndex, name, "missing from children index of %q", w.Parent)
			}
		}
		heads := headsSpace(name)
		var last HeadEntry
		var prev uint64
		entries := 0
		_ = tx.Scan(heads.Prefix(nil), meta.ScanOptions{}, func(hk meta.Key, hv []byte) error {
			entries++
			e, err := decodeHeadEntry(name, heads.Leaf(hk), hv)
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
		if entries == 0 {
			r.problem(ProblemBadHeadLog, name, "no head log")
			return nil
		}
		if last.Seq != w.Seq || last.Gen != w.Head {
			r.problem(ProblemBadHeadLog, name, "record says seq %d head %s, log ends at seq %d gen %s",
				w.Seq, shortOrNone(w.Head), last.Seq, shortOrNone(last.Gen))
		}
		ops := operationsSpace(name)
		_ = tx.Scan(ops.Prefix(nil), meta.ScanOptions{}, func(ok meta.Key, seq []byte) error {
			op := ops.Leaf(ok)
			var hv []byte
			if len(seq) == 8 {
				hv, _, _ = tx.Get(heads.Key(seq))
			}
			var e HeadEntry
			if hv == nil || json.Unmarshal(hv, &e) != nil || e.Operation != string(op) {
				r.problem(ProblemBadIndex, name, "operation %q indexes entry %x, which does not carry it", op, seq)
			}
			return nil
		})
		return nil
	})
	_ = tx.Scan(spaceChildren.Prefix(nil), meta.ScanOptions{}, func(ck meta.Key, _ []byte) error {
		k := spaceChildren.Leaf(ck)
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
}
