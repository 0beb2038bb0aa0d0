package gitmerge

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"

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
	contribO := io != nil && !(same(ib, io) && ho == hb)
	contribT := it != nil && !(same(ib, it) && ht == hb)
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
	empty, err := j.emptyTree(g)
	if err != nil {
		return nil, err
	}
	trees, err := j.treesOf(g, empty, m, ho, ht)
	if err != nil {
		return nil, err
	}
	tm, to, tt := trees[0], trees[1], trees[2]
	var stagedO, stagedT map[string]stagedChange
	if contribO {
		if stagedO, err = j.staged(g, io, "ours", ho, empty); err != nil {
			return nil, err
		}
	}
	if contribT {
		if stagedT, err = j.staged(g, it, "theirs", ht, empty); err != nil {
			return nil, err
		}
	}
	switch {
	case io != nil && tm == to && len(stagedT) == 0:
		return clone(io), nil
	case it != nil && tm == tt && len(stagedO) == 0:
		return clone(it), nil
	}
	// Rebuild: the merged HEAD's tree, then the staged changes on top.
	idx := filepath.Join(g.dir, "merged-index")
	env := []string{"GIT_INDEX_FILE=" + idx}
	if m == "" {
		_, err = g.ok(nil, env, "read-tree", "--empty")
	} else {
		_, err = g.ok(nil, env, "read-tree", tm)
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

// treesOf returns the tree of each commit ("" → the empty tree; a name
// git cannot peel to a tree → "").
func (j *job) treesOf(g *repo, empty string, commits ...string) ([]string, error) {
	out := make([]string, len(commits))
	var args []string
	var at []int
	for i, c := range commits {
		if c == "" {
			out[i] = empty
			continue
		}
		args = append(args, c+"^{tree}")
		at = append(at, i)
	}
	if len(args) == 0 {
		return out, nil
	}
	stdout, err := g.ok([]byte(strings.Join(args, "\n")+"\n"), nil, "cat-file", "--batch-check=%(objectname)")
	if err != nil {
		return nil, err
	}
	lines := strings.Split(strings.TrimSpace(string(stdout)), "\n")
	if len(lines) != len(args) {
		return nil, fmt.Errorf("%w: cat-file printed %q for %q", ErrGit, stdout, args)
	}
	for k, i := range at {
		if v := strings.TrimSpace(lines[k]); isObjectName(v) {
			out[i] = v
		}
	}
	return out, nil
}

// staged lists what the side's index has staged against its HEAD (or the
// empty tree on an unborn branch).
func (j *job) staged(g *repo, index *store.Entry, side, head, empty string) (map[string]stagedChange, error) {
	p := filepath.Join(g.dir, "index-"+side)
	if err := g.place(p, index.ID); err != nil {
		return nil, err
	}
	if head == "" {
		head = empty
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
			newV, oldV := c.newMode+" "+c.newSHA, c.oldMode+" "+c.oldSHA
			if zeroSHA(c.newSHA) {
				newV = ""
			}
			if zeroSHA(c.oldSHA) {
				oldV = ""
			}
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
	var buf bytes.Buffer
	for p, v := range want {
		if v == "" {
			v = "0 " + strings.Repeat("0", len(anySHA(cur, sides)))
		}
		fmt.Fprintf(&buf, "%s\t%s\x00", v, p)
	}
	if _, err := g.ok(buf.Bytes(), env, "update-index", "-z", "--index-info"); err != nil {
		return false, err
	}
	return true, nil
}

// anySHA returns an object name of the repository's length.
func anySHA(cur map[string]string, sides []map[string]stagedChange) string {
	for _, changes := range sides {
		for _, c := range changes {
			return c.oldSHA
		}
	}
	for _, v := range cur {
		if _, sha, ok := strings.Cut(v, " "); ok {
			return sha
		}
	}
	return strings.Repeat("0", 40)
}

// place puts blob id at path dst (a hard link, or a copy).
func (r *repo) place(dst string, id store.ID) error {
	rel, err := filepath.Rel(r.src, dst)
	if err != nil {
		return fmt.Errorf("gitmerge: place %s: %w", dst, err)
	}
	return r.linkOne(object{name: rel, id: id})
}
