package rebase

import (
	"fmt"
	"slices"
	"strings"

	"github.com/acyclicfs/acyclicfs/store"
)

// attrReader answers "what is the merge attribute of this path" during one
// Merge3 from the .gitattributes files in the trees being merged.
//
// Which tree: git reads attributes from the working tree (and index), which
// during a merge hold ours. So ours' tree is read, and theirs' only for a
// directory where ours has no .gitattributes entry at all (theirs added
// one: its rules then apply to the merge that brings it in). One
// consequence: a .gitattributes that ours deleted and theirs kept is read
// from theirs.
//
// Which files: those of the path's directory and its ancestors up to the
// top of the innermost git repository holding it — a directory with a .git
// entry in ours — or up to the root of the merge where there is none. Each
// repository's top-level file is the one where "[attr]" macro definitions
// are allowed, as in git. A .gitattributes that is not a regular file (a
// symlink, a directory) has no rules: git does not follow in-tree symlinks
// for it. $GIT_DIR/info/attributes and core.attributesFile are not read.
//
// Everything is read lazily and cached per directory, so a merge that never
// merges the content of a regular file both sides changed reads nothing.
type attrReader struct {
	r      TreeReader
	ours   store.ID
	theirs store.ID
	dirs   map[string]*attrDir
	// open holds ours' and theirs' trees of the directories the merge is
	// inside (mergeDir's recursion), so that looking up a path in them
	// reads no tree twice.
	open map[string][2]*store.Tree
}

// enter notes the trees of a directory the merge is entering; leave drops
// them. Both are cheap: nothing is read.
func (a *attrReader) enter(path string, ours, theirs *store.Tree) {
	if a.open == nil {
		a.open = map[string][2]*store.Tree{}
	}
	a.open[path] = [2]*store.Tree{ours, theirs}
}

func (a *attrReader) leave(path string) { delete(a.open, path) }

// attrDir is what attrReader knows of one directory.
type attrDir struct {
	trees [2]*store.Tree // ours, theirs; nil where absent
	top   string         // the directory's repository top ("" the root)
	stack attrStack      // dirs relative to top
}

func newAttrReader(r TreeReader, ours, theirs store.ID) *attrReader {
	return &attrReader{r: r, ours: ours, theirs: theirs}
}

func splitDir(path string) (dir, name string) {
	i := strings.LastIndexByte(path, '/')
	if i < 0 {
		return "", path
	}
	return path[:i], path[i+1:]
}

func findEntry(t *store.Tree, name string) *store.Entry {
	if t == nil {
		return nil
	}
	i, ok := slices.BinarySearchFunc(t.Entries, name, func(e store.Entry, n string) int { return strings.Compare(e.Name, n) })
	if !ok {
		return nil
	}
	return &t.Entries[i]
}

func (a *attrReader) tree(path string, id store.ID) (*store.Tree, error) {
	t, err := a.r.GetTree(id)
	if err != nil {
		return nil, fmt.Errorf("rebase: read tree %s at %q for .gitattributes: %w", id.Short(), displayPath(path), err)
	}
	return t, nil
}

func (a *attrReader) dir(path string) (*attrDir, error) {
	if d, ok := a.dirs[path]; ok {
		return d, nil
	}
	if a.dirs == nil {
		a.dirs = map[string]*attrDir{}
	}
	d := &attrDir{}
	open, isOpen := a.open[path]
	if isOpen {
		d.trees = open
	}
	if path == "" {
		for i, id := range []store.ID{a.ours, a.theirs} {
			if isOpen {
				break
			}
			if id.IsZero() {
				continue
			}
			t, err := a.tree(path, id)
			if err != nil {
				return nil, err
			}
			d.trees[i] = t
		}
	} else {
		pdir, name := splitDir(path)
		parent, err := a.dir(pdir)
		if err != nil {
			return nil, err
		}
		for i, pt := range parent.trees {
			if isOpen {
				break
			}
			if e := findEntry(pt, name); e != nil && e.Kind == store.KindDir {
				if d.trees[i], err = a.tree(path, e.ID); err != nil {
					return nil, err
				}
			}
		}
		d.top, d.stack = parent.top, slices.Clip(parent.stack)
		if findEntry(d.trees[0], ".git") != nil {
			d.top, d.stack = path, nil
		}
	}
	e := findEntry(d.trees[0], ".gitattributes")
	if e == nil {
		e = findEntry(d.trees[1], ".gitattributes")
	}
	if e != nil && (e.Kind == store.KindFile || e.Kind == store.KindExec) && e.Size <= attrMaxFile {
		data, err := a.r.ReadBlob(e.ID)
		if err != nil {
			return nil, fmt.Errorf("rebase: read %s: %w", joinPath(path, ".gitattributes"), err)
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(path, d.top), "/")
		if rules := parseAttrFile(data, rel == ""); rules != nil {
			d.stack = append(d.stack, attrFile{dir: rel, rules: rules})
		}
	}
	a.dirs[path] = d
	return d, nil
}

// lookup returns the state of attribute name for the file at path.
func (a *attrReader) lookup(path, name string) (attrAssign, error) {
	dir, _ := splitDir(path)
	d, err := a.dir(dir)
	if err != nil {
		return attrAssign{}, err
	}
	rel := strings.TrimPrefix(strings.TrimPrefix(path, d.top), "/")
	return d.stack.lookup(rel, name), nil
}
