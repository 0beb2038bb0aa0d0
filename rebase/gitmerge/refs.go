package gitmerge

import (
	"bytes"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/acyclicfs/acyclicfs/rebase"
	"github.com/acyclicfs/acyclicfs/store"
)

// sideRefs are one side's refs as git resolves them.
type sideRefs struct {
	loose  map[string]store.Entry // loose ref files by ref name
	packed map[string]string      // packed-refs values
	refs   map[string]string      // resolved: loose over packed
	head   string                 // HEAD's content, trimmed
	headE  *store.Entry
}

// packedRec is one ref of a packed-refs file with its lines.
type packedRec struct {
	name  string
	value string
	lines []byte // "<sha> <name>\n" plus a "^<peeled>\n" line if any
}

func parsePacked(data []byte) (header []byte, recs []packedRec) {
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i+1], data[i+1:]
		} else {
			data = nil
		}
		text := strings.TrimRight(string(line), "\r\n")
		switch {
		case strings.HasPrefix(text, "#"):
			if len(recs) == 0 {
				header = append(header, line...)
			}
		case strings.HasPrefix(text, "^"):
			if len(recs) > 0 {
				recs[len(recs)-1].lines = append(recs[len(recs)-1].lines, line...)
			}
		default:
			sha, name, ok := strings.Cut(text, " ")
			if ok && name != "" {
				recs = append(recs, packedRec{name: name, value: sha, lines: append([]byte(nil), line...)})
			}
		}
	}
	return header, recs
}

func (j *job) readSideRefs(t *store.Tree, side string) (*sideRefs, error) {
	s := &sideRefs{loose: map[string]store.Entry{}, packed: map[string]string{}, refs: map[string]string{}}
	if e, ok := t.Lookup("packed-refs"); ok && e.Kind.IsRegular() {
		data, err := j.readBlob(&e, "packed-refs")
		if err != nil {
			return nil, err
		}
		_, recs := parsePacked(data)
		for _, r := range recs {
			s.packed[r.name] = r.value
			s.refs[r.name] = r.value
		}
	}
	if e, ok := t.Lookup("refs"); ok && e.Kind == store.KindDir {
		d, err := j.openDir(&e)
		if err != nil {
			return nil, fmt.Errorf("gitmerge: refs (%s): %w", side, err)
		}
		err = j.walk(d, "refs/", func(rel string, e store.Entry) error {
			if !e.Kind.IsRegular() {
				return nil
			}
			data, err := j.readBlob(&e, rel)
			if err != nil {
				return err
			}
			s.loose[rel] = e
			s.refs[rel] = strings.TrimSpace(string(data))
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	if e, ok := t.Lookup("HEAD"); ok && e.Kind.IsRegular() {
		data, err := j.readBlob(&e, "HEAD")
		if err != nil {
			return nil, err
		}
		s.head = strings.TrimSpace(string(data))
		s.headE = &e
	}
	return s, nil
}

// resolve follows symbolic refs from v to an object name ("" if none).
func resolve(v string, refs map[string]string) string {
	for range 8 {
		target, ok := strings.CutPrefix(v, "ref:")
		if !ok {
			return v
		}
		v = refs[strings.TrimSpace(target)]
	}
	return ""
}

// refsResult is the merged refs.
type refsResult struct {
	b, o, t     *sideRefs
	refs        map[string]string // merged, resolved
	refsEntry   *store.Entry
	packedEntry *store.Entry
	merges      map[string]bool // refs that got a merge commit
	head        string          // merged HEAD's content
}

func (j *job) mergeRefs() (*refsResult, error) {
	res := &refsResult{refs: map[string]string{}, merges: map[string]bool{}}
	var err error
	if res.b, err = j.readSideRefs(j.bt, "base"); err != nil {
		return nil, err
	}
	if res.o, err = j.readSideRefs(j.ot, "ours"); err != nil {
		return nil, err
	}
	if res.t, err = j.readSideRefs(j.tt, "theirs"); err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for _, s := range []*sideRefs{res.b, res.o, res.t} {
		for n := range s.refs {
			names[n] = true
		}
	}
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)
	// theirs is where a diverged ref's theirs value goes; applied last so
	// that it wins over a stale value of that ref.
	theirs := map[string]string{}
	for _, n := range sorted {
		b, o, t := res.b.refs[n], res.o.refs[n], res.t.refs[n]
		var v string
		switch {
		case o == t, b == t:
			v = o
		case b == o:
			v = t
		case o == "" || t == "":
			v = o + t // modified beats deleted: keep what a side still uses
		default:
			if v, err = j.mergeRef(res, n, b, o, t, theirs); err != nil {
				return nil, err
			}
		}
		if v != "" {
			res.refs[n] = v
		}
	}
	for n, v := range theirs {
		res.refs[n] = v
	}
	if err := j.writeRefs(res); err != nil {
		return nil, err
	}
	return res, nil
}

func isObjectName(v string) bool { return isHex(v, 40) || isHex(v, 64) }

// mergeRef merges a ref both sides moved to different values.
func (j *job) mergeRef(res *refsResult, name, b, o, t string, theirs map[string]string) (string, error) {
	if !isObjectName(o) || !isObjectName(t) {
		return o, nil // a symbolic ref (or garbage): ours
	}
	g, err := j.git()
	if err != nil {
		return "", err
	}
	r, err := g.run(nil, nil, "merge-base", o, t)
	if err != nil {
		return "", err
	}
	mb := strings.TrimSpace(string(r.out))
	switch {
	case r.code == 0 && mb == o:
		return t, nil
	case r.code == 0 && mb == t:
		return o, nil
	case (r.code == 0 || r.code == 1) && strings.HasPrefix(name, "refs/heads/"):
		m, ok, err := j.mergeCommit(g, name, o, t)
		if err != nil {
			return "", err
		}
		if ok {
			res.merges[name] = true
			j.addReflog(name, o, m, t)
			return m, nil
		}
	}
	// Not a branch, not mergeable by git, or not commits: ours stays and
	// theirs is kept where nothing reaches it by accident.
	keep := TheirsPrefix + strings.TrimPrefix(name, "refs/")
	theirs[keep] = t
	be, oe, te, err := j.refConflictEntries(res, name, b, o, t)
	if err != nil {
		return "", err
	}
	j.conflict(ConflictRef, name, be, oe, te)
	return o, nil
}

// mergeCommit merges commits o and t with git's merge and commits the
// result deterministically: fixed identity, the later committer date of
// the two, a message naming both. ok is false when git's merge conflicts.
func (j *job) mergeCommit(g *repo, name, o, t string) (string, bool, error) {
	var r gitResult
	for {
		var err error
		r, err = g.run(nil, nil, "merge-tree", "--write-tree", "--allow-unrelated-histories", "-z", "--name-only", "--no-messages", o, t)
		if err != nil {
			return "", false, err
		}
		if r.code <= 1 {
			break
		}
		// Git died (a missing object): retry once with every object.
		more, err := g.linkLater()
		if err != nil {
			return "", false, err
		}
		if !more {
			break
		}
	}
	if r.code != 0 {
		return "", false, nil // 1: conflicts; >1: git could not merge them
	}
	tree, _, _ := strings.Cut(string(r.out), "\x00")
	tree = strings.TrimSpace(tree)
	if !isObjectName(tree) {
		return "", false, fmt.Errorf("%w: merge-tree printed %q", ErrGit, r.out)
	}
	out, err := g.ok(nil, nil, "log", "--no-walk=unsorted", "--date=raw", "--format=%cd", o, t)
	if err != nil {
		return "", false, err
	}
	date := ""
	var best int64 = -1 << 62
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		if ts, err := strconv.ParseInt(f[0], 10, 64); err == nil && ts > best {
			best, date = ts, f[0]+" "+f[1]
		}
	}
	if date == "" {
		return "", false, fmt.Errorf("%w: no committer dates for %s %s: %q", ErrGit, o, t, out)
	}
	branch := strings.TrimPrefix(name, "refs/heads/")
	msg := fmt.Sprintf("Merge %s of two acyclicfs forks\n\nours:   %s\ntheirs: %s\n", branch, o, t)
	env := []string{
		"GIT_AUTHOR_NAME=acyclicfs", "GIT_AUTHOR_EMAIL=acyclicfs@localhost", "GIT_AUTHOR_DATE=" + date,
		"GIT_COMMITTER_NAME=acyclicfs", "GIT_COMMITTER_EMAIL=acyclicfs@localhost", "GIT_COMMITTER_DATE=" + date,
	}
	out, err = g.ok([]byte(msg), env, "commit-tree", tree, "-p", o, "-p", t)
	if err != nil {
		return "", false, err
	}
	m := strings.TrimSpace(string(out))
	if !isObjectName(m) {
		return "", false, fmt.Errorf("%w: commit-tree printed %q", ErrGit, out)
	}
	j.mergeDate = date
	return m, true, nil
}

// addReflog records the reflog line of a merge commit on ref name.
func (j *job) addReflog(name, o, m, t string) {
	if j.reflogAdd == nil {
		j.reflogAdd = map[string][]string{}
	}
	line := fmt.Sprintf("%s %s acyclicfs <acyclicfs@localhost> %s\tmerge %s: acyclicfs fork merge", o, m, j.mergeDate, t)
	j.reflogAdd[name] = append(j.reflogAdd[name], line)
}

// refConflictEntries returns entries of blobs holding each side's value
// as a loose ref file, so that taking any side at the ref's path is a
// valid ref.
func (j *job) refConflictEntries(res *refsResult, name, b, o, t string) (be, oe, te *store.Entry, err error) {
	mk := func(v string, s *sideRefs) (*store.Entry, error) {
		if v == "" {
			return nil, nil
		}
		if e, ok := s.loose[name]; ok && s.refs[name] == v {
			data, err := j.readBlob(&e, name)
			if err == nil && string(data) == v+"\n" {
				return &e, nil
			}
		}
		return j.newBlobEntry([]byte(v+"\n"), nil, nil)
	}
	if be, err = mk(b, res.b); err != nil {
		return
	}
	if oe, err = mk(o, res.o); err != nil {
		return
	}
	te, err = mk(t, res.t)
	return
}

// writeRefs builds refs/ and packed-refs so that git resolves every ref
// to its merged value: loose files merge path by path (ours where both
// changed one), packed-refs is one side's or the union, and then, per ref
// where what git would read differs from the merged value, a loose file
// is written (it overrides packed) or a deleted ref is removed from both.
func (j *job) writeRefs(res *refsResult) error {
	var b, o, t *store.Entry
	get := func(tr *store.Tree, name string) *store.Entry {
		if e, ok := tr.Lookup(name); ok {
			return &e
		}
		return nil
	}
	b, o, t = get(j.bt, "refs"), get(j.ot, "refs"), get(j.tt, "refs")
	loose, err := j.merge3("refs", b, o, t, oursPolicy)
	if err != nil {
		return err
	}
	d, err := j.openDir(loose)
	if err != nil {
		return err
	}
	// What the merged loose files say.
	have := map[string]string{}
	err = j.walk(d, "refs/", func(rel string, e store.Entry) error {
		if !e.Kind.IsRegular() {
			return nil
		}
		data, err := j.readBlob(&e, rel)
		if err != nil {
			return err
		}
		have[rel] = strings.TrimSpace(string(data))
		return nil
	})
	if err != nil {
		return err
	}
	// packed-refs: one side's file, or the union rewritten.
	pb, po, pt := get(j.bt, "packed-refs"), get(j.ot, "packed-refs"), get(j.tt, "packed-refs")
	var packed *store.Entry
	var header []byte
	var recs []packedRec
	regen := false
	switch {
	case rebase.SameContent(po, pt), rebase.SameContent(pb, pt):
		packed = po
	case rebase.SameContent(pb, po):
		packed = pt
	default:
		regen = true
	}
	if packed != nil && packed.Kind.IsRegular() {
		data, err := j.readBlob(packed, "packed-refs")
		if err != nil {
			return err
		}
		header, recs = parsePacked(data)
	}
	if regen {
		header = []byte("# pack-refs with: sorted \n")
		recs = nil
		names := map[string]bool{}
		for n := range res.o.packed {
			names[n] = true
		}
		for n := range res.t.packed {
			names[n] = true
		}
		for n := range names {
			if v, ok := res.refs[n]; ok && isObjectName(v) {
				recs = append(recs, packedRec{name: n, value: v, lines: []byte(v + " " + n + "\n")})
			}
		}
		sort.Slice(recs, func(a, b int) bool { return recs[a].name < recs[b].name })
	}
	// Drop packed refs the merge deleted.
	kept := recs[:0]
	dropped := regen
	for _, r := range recs {
		if _, ok := res.refs[r.name]; ok {
			kept = append(kept, r)
		} else {
			dropped = true
		}
	}
	recs = kept
	packedVal := map[string]string{}
	for _, r := range recs {
		packedVal[r.name] = r.value
	}
	// Fix up loose files so git reads the merged values.
	names := map[string]bool{}
	for n := range res.refs {
		names[n] = true
	}
	for n := range have {
		names[n] = true
	}
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)
	for _, n := range sorted {
		want, wok := res.refs[n]
		cur, lok := have[n]
		if !lok {
			cur = packedVal[n]
		}
		if wok && cur == want {
			continue
		}
		var e *store.Entry
		if wok {
			if e, err = j.refEntry(res, n, want); err != nil {
				return err
			}
		}
		ok, err := d.set(j, strings.TrimPrefix(n, "refs/"), e)
		if err != nil {
			return err
		}
		if !ok {
			// A file/directory clash between ref names of the two sides
			// (refs/heads/a vs refs/heads/a/b): the name that does not fit
			// is left out and reported.
			j.conflict(ConflictRef, n, nil, looseEntry(res.o, n), looseEntry(res.t, n))
		}
	}
	re, err := j.writeDir(d, "refs")
	if err != nil {
		return err
	}
	res.refsEntry = &re
	switch {
	case !dropped:
		res.packedEntry = clone(packed)
	case len(recs) == 0 && regen:
		res.packedEntry = nil
	default:
		var buf bytes.Buffer
		buf.Write(header)
		for _, r := range recs {
			buf.Write(r.lines)
		}
		if res.packedEntry, err = j.newBlobEntry(buf.Bytes(), po, pt); err != nil {
			return err
		}
	}
	return nil
}

func looseEntry(s *sideRefs, n string) *store.Entry {
	if e, ok := s.loose[n]; ok {
		return &e
	}
	return nil
}

// refEntry returns a loose ref file entry holding v: a side's file if one
// has exactly that, else a new blob.
func (j *job) refEntry(res *refsResult, n, v string) (*store.Entry, error) {
	for _, s := range []*sideRefs{res.o, res.t, res.b} {
		if e, ok := s.loose[n]; ok && s.refs[n] == v {
			if data, err := j.readBlob(&e, n); err == nil && string(data) == v+"\n" {
				return &e, nil
			}
		}
	}
	return j.newBlobEntry([]byte(v+"\n"), nil, nil)
}
