package gitmerge

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/acyclicfs/acyclicfs/rebase"
	"github.com/acyclicfs/acyclicfs/store"
)

// stagedChange is one path where a side's index differs from its HEAD's
// tree (git diff-index --cached).
type stagedChange struct {
	oldMode, oldSHA string
	newMode, newSHA string
	unmerged        bool
}

// mergeIndex makes the merged index: the merged HEAD's tree, plus what
// each side had staged and not committed. Where a side's index already is
// that (its HEAD is the merged HEAD, or has the same tree, and the other
// side staged nothing new) its bytes are kept, stat data and all, so that
// git status stays fast; otherwise the index is rebuilt by git
// (read-tree, update-index) with no stat data, which git status
// re-hashes.
func (j *job) mergeIndex(res *refsResult, _ *store.Entry) (*store.Entry, error) {
	get := func(t *store.Tree) *store.Entry {
		if e, ok := t.Lookup("index"); ok && e.Kind.IsRegular() {
			return &e
		}
		return nil
	}
	ib, io, it := get(j.bt), get(j.ot), get(j.tt)
	m := resolve(res.head, res.refs)
	hb := resolve(res.b.head, res.b.refs)
	ho := resolve(res.o.head, res.o.refs)
	ht := resolve(res.t.head, res.t.refs)
	// A side contributes staged changes only if it touched its index or
	// HEAD since base; an untouched side has nothing of its own to add.
	contribO := io != nil && !(rebase.SameContent(ib, io) && ho == hb)
	contribT := it != nil && !(rebase.SameContent(ib, it) && ht == hb)
	switch {
	case io == nil && it == nil:
		return nil, nil
	case m == ho && !contribT:
		return clone(io), nil
	case m == ht && !contribO:
		return clone(it), nil
	}
	g, err := j.git()
	if err != nil {
		return nil, err
	}
	var stagedO, stagedT map[string]stagedChange
	if contribO {
		if stagedO, err = j.staged(g, io, "ours", ho); err != nil {
			return nil, err
		}
	}
	if contribT {
		if stagedT, err = j.staged(g, it, "theirs", ht); err != nil {
			return nil, err
		}
	}
	if io == nil || ho == "" || m == "" {
		return j.rebuildIndex(g, m, ib, io, it, stagedO, stagedT)
	}
	// Ours' index moved from ours' HEAD to the merged HEAD: the paths
	// whose tree entries differ get the merged HEAD's entry; ours' stat
	// data stays on every other path.
	out, err := g.ok(nil, nil, "diff-tree", "-r", "-z", "--no-renames", "--no-abbrev", ho, m)
	if err != nil {
		return nil, err
	}
	moved, err := parseRaw(out)
	if err != nil {
		return nil, err
	}
	updates := map[string]string{}
	for p, c := range moved {
		updates[p] = c.newV()
	}
	for p, c := range stagedO {
		if mc, ok := moved[p]; ok && (c.unmerged || c.newV() != mc.newV()) {
			j.conflict(ConflictIndex, "index", ib, io, it)
			return clone(io), nil
		}
	}
	if len(stagedT) > 0 {
		have, err := j.treeValues(g, m, stagedT)
		if err != nil {
			return nil, err
		}
		for p, c := range stagedT {
			switch {
			case c.unmerged || have[p] != c.newV() && have[p] != c.oldV():
				j.conflict(ConflictIndex, "index", ib, io, it)
				return clone(io), nil
			case have[p] == c.newV():
				continue
			}
			if oc, ok := stagedO[p]; ok && oc.newV() != c.newV() {
				j.conflict(ConflictIndex, "index", ib, io, it)
				return clone(io), nil
			}
			updates[p] = c.newV()
		}
	}
	if len(updates) == 0 {
		return clone(io), nil
	}
	idx := filepath.Join(g.dir, "merged-index")
	if err := g.place(idx, io.ID); err != nil {
		return nil, err
	}
	// update-index writes a new file and renames it over idx, so the link
	// to ours' blob is replaced, never written through.
	if err := g.updateIndex(idx, updates); err != nil {
		return nil, err
	}
	data, err := os.ReadFile(idx)
	if err != nil {
		return nil, fmt.Errorf("gitmerge: read merged index: %w", err)
	}
	return j.newBlobEntry(data, io, it)
}

func (c stagedChange) newV() string {
	if zeroSHA(c.newSHA) {
		return ""
	}
	return c.newMode + " " + c.newSHA
}

func (c stagedChange) oldV() string {
	if zeroSHA(c.oldSHA) {
		return ""
	}
	return c.oldMode + " " + c.oldSHA
}

// treeValues returns "mode sha" of each path of paths in commit m's tree
// ("" where absent).
func (j *job) treeValues(g *repo, m string, paths map[string]stagedChange) (map[string]string, error) {
	args := []string{"ls-tree", "-z", "--full-tree", m, "--"}
	for p := range paths {
		args = append(args, p)
	}
	out, err := g.ok(nil, nil, args...)
	if err != nil {
		return nil, err
	}
	vals := map[string]string{}
	for _, rec := range bytes.Split(out, []byte{0}) {
		meta, p, ok := strings.Cut(string(rec), "\t")
		if f := strings.Fields(meta); ok && len(f) == 3 {
			vals[p] = f[0] + " " + f[2]
		}
	}
	return vals, nil
}

// updateIndex sets paths of the index file idx ("" removes), removals
// first so that a file may become a directory.
func (g *repo) updateIndex(idx string, updates map[string]string) error {
	paths := make([]string, 0, len(updates))
	for p := range updates {
		paths = append(paths, p)
	}
	sort.Slice(paths, func(a, b int) bool {
		da, db := updates[paths[a]] == "", updates[paths[b]] == ""
		if da != db {
			return da
		}
		return paths[a] < paths[b]
	})
	var buf bytes.Buffer
	for _, p := range paths {
		v := updates[p]
		if v == "" {
			v = "0 " + strings.Repeat("0", g.hexLen)
		}
		fmt.Fprintf(&buf, "%s\t%s\x00", v, p)
	}
	_, err := g.ok(buf.Bytes(), []string{"GIT_INDEX_FILE=" + idx}, "update-index", "-z", "--replace", "--index-info")
	return err
}

// rebuildIndex makes the index from scratch: the merged HEAD's tree (or
// nothing on an unborn branch), then both sides' staged changes.
func (j *job) rebuildIndex(g *repo, m string, ib, io, it *store.Entry, stagedO, stagedT map[string]stagedChange) (*store.Entry, error) {
	idx := filepath.Join(g.dir, "merged-index")
	env := []string{"GIT_INDEX_FILE=" + idx}
	var err error
	if m == "" {
		_, err = g.ok(nil, env, "read-tree", "--empty")
	} else {
		_, err = g.ok(nil, env, "read-tree", m)
	}
	if err != nil {
		return nil, err
	}
	if len(stagedO)+len(stagedT) > 0 {
		ok, err := j.applyStaged(g, env, stagedO, stagedT)
		if err != nil {
			return nil, err
		}
		if !ok {
			j.conflict(ConflictIndex, "index", ib, io, it)
			return clone(io), nil
		}
	}
	data, err := os.ReadFile(idx)
	if err != nil {
		return nil, fmt.Errorf("gitmerge: read rebuilt index: %w", err)
	}
	return j.newBlobEntry(data, io, it)
}

func (j *job) emptyTree(g *repo) (string, error) {
	out, err := g.ok(nil, nil, "hash-object", "-t", "tree", "--stdin")
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(out)), nil
}

// staged lists what the side's index has staged against its HEAD (or the
// empty tree on an unborn branch).
func (j *job) staged(g *repo, index *store.Entry, side, head string) (map[string]stagedChange, error) {
	p := filepath.Join(g.dir, "index-"+side)
	if err := g.place(p, index.ID); err != nil {
		return nil, err
	}
	if head == "" {
		var err error
		if head, err = j.emptyTree(g); err != nil {
			return nil, err
		}
	}
	out, err := g.ok(nil, []string{"GIT_INDEX_FILE=" + p}, "diff-index", "--cached", "-z", "--no-renames", "--no-abbrev", head, "--")
	if err != nil {
		return nil, fmt.Errorf("gitmerge: staged changes of %s: %w", side, err)
	}
	return parseRaw(out)
}

// parseRaw parses "git diff-index -z" raw output.
func parseRaw(out []byte) (map[string]stagedChange, error) {
	res := map[string]stagedChange{}
	fields := bytes.Split(out, []byte{0})
	for i := 0; i+1 < len(fields); i += 2 {
		meta := strings.Fields(strings.TrimPrefix(string(fields[i]), ":"))
		if len(meta) != 5 {
			return nil, fmt.Errorf("%w: diff-index printed %q", ErrGit, fields[i])
		}
		res[string(fields[i+1])] = stagedChange{
			oldMode: meta[0], newMode: meta[1], oldSHA: meta[2], newSHA: meta[3],
			unmerged: meta[4] == "U",
		}
	}
	return res, nil
}

func zeroSHA(s string) bool { return strings.Trim(s, "0") == "" }

// applyStaged puts the staged changes of both sides on the rebuilt index.
// A change applies when the merged HEAD still has what the change was
// made against (or already has its result); ok is false when one does
// not, or when the sides staged the same path differently.
func (j *job) applyStaged(g *repo, env []string, sides ...map[string]stagedChange) (bool, error) {
	out, err := g.ok(nil, env, "ls-files", "-s", "-z")
	if err != nil {
		return false, err
	}
	cur := map[string]string{} // path → "mode sha"
	for _, rec := range bytes.Split(out, []byte{0}) {
		meta, p, ok := strings.Cut(string(rec), "\t")
		if !ok {
			continue
		}
		f := strings.Fields(meta)
		if len(f) == 3 {
			cur[p] = f[0] + " " + f[1]
		}
	}
	want := map[string]string{} // path → "mode sha" or "" (remove)
	for _, changes := range sides {
		for p, c := range changes {
			if c.unmerged {
				return false, nil
			}
			newV, oldV := c.newV(), c.oldV()
			have := cur[p]
			switch {
			case have == newV:
				continue
			case have != oldV:
				return false, nil
			}
			if w, ok := want[p]; ok && w != newV {
				return false, nil
			}
			want[p] = newV
		}
	}
	if len(want) == 0 {
		return true, nil
	}
	idx := strings.TrimPrefix(env[0], "GIT_INDEX_FILE=")
	if err := g.updateIndex(idx, want); err != nil {
		return false, err
	}
	return true, nil
}

// place puts blob id at path dst (a hard link, or a copy).
func (r *repo) place(dst string, id store.ID) error {
	rel, err := filepath.Rel(r.src, dst)
	if err != nil {
		return fmt.Errorf("gitmerge: place %s: %w", dst, err)
	}
	return r.linkOne(object{name: rel, id: id})
}
