package workspace

import (
	"fmt"
	"io"

	"golang.org/x/sys/unix"

	"github.com/acyclicfs/acyclicfs/rebase"
	"github.com/acyclicfs/acyclicfs/store"
)

// maxDiffBytes bounds the text a unified diff reads per file; larger files
// are reported like binary ones.
const maxDiffBytes = 8 << 20

// DiffRefs resolves the two sides of `diff NAME [OTHER]`: NAME's base (or
// OTHER) as the old side, NAME's head as the new side.
func (m *Manager) DiffRefs(name, other string) (from, to store.ID, err error) {
	w, err := m.Get(name)
	if err != nil {
		return from, to, err
	}
	to = w.Head
	if other == "" {
		from = w.Base
		return from, to, nil
	}
	from, err = m.ResolveRef(other)
	return from, to, err
}

// Diff lists the changes from generation a to generation b (zero = empty).
func (m *Manager) Diff(a, b store.ID) ([]rebase.Change, error) {
	ra, err := m.rootOf(a)
	if err != nil {
		return nil, err
	}
	rb, err := m.rootOf(b)
	if err != nil {
		return nil, err
	}
	return rebase.Diff(merger{m.st}, ra, rb)
}

// WriteUnified writes a unified diff of changes to w.
func (m *Manager) WriteUnified(w io.Writer, changes []rebase.Change) error {
	for _, c := range changes {
		old, oerr := m.diffSide(c.Old)
		nw, nerr := m.diffSide(c.New)
		if oerr != nil {
			return oerr
		}
		if nerr != nil {
			return nerr
		}
		aName, bName := "a/"+c.Path, "b/"+c.Path
		if c.Old == nil {
			aName = "/dev/null"
		}
		if c.New == nil {
			bName = "/dev/null"
		}
		if _, err := fmt.Fprintf(w, "diff --acyclicfs a/%s b/%s\n", c.Path, c.Path); err != nil {
			return err
		}
		if c.Old != nil && c.New != nil && modeString(c.Old) != modeString(c.New) {
			fmt.Fprintf(w, "old mode %s\nnew mode %s\n", modeString(c.Old), modeString(c.New))
		} else if c.Old == nil {
			fmt.Fprintf(w, "new file mode %s\n", modeString(c.New))
		} else if c.New == nil {
			fmt.Fprintf(w, "deleted file mode %s\n", modeString(c.Old))
		}
		writeDevices(w, c.Old, c.New)
		if old.binary || nw.binary {
			if old.id != nw.id {
				fmt.Fprintf(w, "Binary files %s and %s differ\n", aName, bName)
			}
			continue
		}
		if old.id == nw.id {
			continue // mode-only change
		}
		if _, err := io.WriteString(w, rebase.UnifiedDiff(aName, bName, old.data, nw.data, 3)); err != nil {
			return err
		}
	}
	return nil
}

type diffContent struct {
	id     store.ID
	data   []byte
	binary bool
}

func (m *Manager) diffSide(e *store.Entry) (diffContent, error) {
	if e == nil || e.Kind == store.KindDir || e.Kind.IsSpecial() {
		return diffContent{}, nil // no content: special files show as modes and device numbers
	}
	if e.Size > maxDiffBytes {
		return diffContent{id: e.ID, binary: true}, nil
	}
	b, err := m.st.ReadBlob(e.ID)
	if err != nil {
		return diffContent{}, fmt.Errorf("read %s: %w", e.Name, err)
	}
	return diffContent{id: e.ID, data: b, binary: e.Kind != store.KindSymlink && rebase.IsBinary(b)}, nil
}

// writeDevices writes the device numbers of device sides, as "old device
// MAJOR,MINOR" and "new device MAJOR,MINOR", when they are not the same.
func writeDevices(w io.Writer, old, nw *store.Entry) {
	num := func(e *store.Entry) (string, bool) {
		if e == nil || !e.Kind.IsDevice() {
			return "", false
		}
		r := e.Rdev()
		return fmt.Sprintf("%d,%d", unix.Major(r), unix.Minor(r)), true
	}
	o, oOK := num(old)
	n, nOK := num(nw)
	if oOK && nOK && o == n {
		return
	}
	if oOK {
		fmt.Fprintf(w, "old device %s\n", o)
	}
	if nOK {
		fmt.Fprintf(w, "new device %s\n", n)
	}
}

// modeString is an entry's mode as git prints it (file type and
// permission bits: 100644, 100755, 120000), with the permission bits the
// tree records — 100600, 104755 — and for what git does not store,
// directories (040755, 040700) and special files, their type and bits.
func modeString(e *store.Entry) string {
	switch k := e.Kind; {
	case k.IsSpecial():
		return fmt.Sprintf("%06o", store.SpecialMode(k)|e.Perm())
	case k == store.KindSymlink:
		return "120000"
	case k == store.KindDir:
		return fmt.Sprintf("%06o", 0o40000|e.Perm())
	}
	return fmt.Sprintf("%06o", 0o100000|e.Perm())
}
