package mergedriver

import (
	"fmt"
	"slices"
	"strings"

	"github.com/acyclicfs/acyclicfs/rebase"
	"github.com/acyclicfs/acyclicfs/store"
)

// TreeConfig returns a Runner.Config for paths of the tree root (the
// workspace's own side of the merge): its Files are global (the store
// owner's own git config content, lowest precedence first; nil entries
// are skipped), the only configuration that defines drivers. Its
// Repository is D/.git/config of the innermost directory D on the path
// (the root included) whose .git is a directory holding a regular file
// config — read to name a driver it defines that did not run, never to
// run one — and its Path the path relative to D. Without such a D the
// path stays as it is.
func TreeConfig(r rebase.TreeReader, root store.ID, global ...[]byte) func(path string) (RepoConfig, error) {
	var base [][]byte
	for _, g := range global {
		if g != nil {
			base = append(base, g)
		}
	}
	return func(path string) (RepoConfig, error) {
		out := RepoConfig{Files: slices.Clip(base), Path: path}
		var cfgID store.ID
		found := false
		dir := ""
		id := root
		parts := strings.Split(path, "/")
		for i := 0; i < len(parts) && !id.IsZero(); i++ {
			t, err := r.GetTree(id)
			if err != nil {
				return RepoConfig{}, fmt.Errorf("mergedriver: read tree at %q: %w", dir, err)
			}
			if g := entry(t, ".git"); g != nil && g.Kind == store.KindDir {
				gt, err := r.GetTree(g.ID)
				if err != nil {
					return RepoConfig{}, fmt.Errorf("mergedriver: read %q: %w", join(dir, ".git"), err)
				}
				if c := entry(gt, "config"); c != nil && (c.Kind == store.KindFile || c.Kind == store.KindExec) {
					cfgID, found = c.ID, true
					out.Path = strings.Join(parts[i:], "/")
				}
			}
			if i == len(parts)-1 {
				break
			}
			id = store.ID{}
			if e := entry(t, parts[i]); e != nil && e.Kind == store.KindDir {
				id = e.ID
			}
			dir = join(dir, parts[i])
		}
		if found {
			data, err := r.ReadBlob(cfgID)
			if err != nil {
				return RepoConfig{}, fmt.Errorf("mergedriver: read git config for %q: %w", path, err)
			}
			out.Repository = data
		}
		return out, nil
	}
}

func join(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

func entry(t *store.Tree, name string) *store.Entry {
	i, ok := slices.BinarySearchFunc(t.Entries, name, func(e store.Entry, n string) int { return strings.Compare(e.Name, n) })
	if !ok {
		return nil
	}
	return &t.Entries[i]
}
