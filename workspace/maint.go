package workspace

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/acyclicfs/acyclicfs/store"
)

// Recover finishes or rolls back interrupted work: core-state transactions,
// export journals and interrupted propagation. It runs on every Open, so the
// next command that touches the store does the work (SPEC durability).
func (m *Manager) Recover() ([]string, error) {
	var done []string
	rep, err := m.cs.Recover()
	if err != nil {
		return done, fmt.Errorf("core state: %w", err)
	}
	for _, id := range rep.RolledBack {
		done = append(done, "transaction "+id+": rolled back")
	}
	for _, id := range rep.RolledForward {
		done = append(done, "transaction "+id+": rolled forward")
	}
	ex, err := m.recoverExports()
	done = append(done, ex...)
	if err != nil {
		return done, err
	}
	mat, err := m.ip.recoverMaterializations()
	done = append(done, mat...)
	if err != nil {
		return done, err
	}
	if done, err = m.recoverContextLandings(done); err != nil {
		return done, err
	}
	parents, err := m.shared.Keys(familyPropagate)
	if err != nil {
		return done, err
	}
	for _, p := range parents {
		if _, err := m.st.GetWorkspace(p); err != nil {
			continue
		}
		m.propagate(context.Background(), p, true)
		done = append(done, "propagation from "+p+": finished")
	}
	return done, nil
}

// RecoveryWork lists what Recover would do (for status).
func (m *Manager) RecoveryWork() ([]string, error) {
	var out []string
	txs, err := m.cs.PendingTransactions()
	if err != nil {
		return nil, err
	}
	for _, t := range txs {
		out = append(out, "transaction "+t)
	}
	ex, err := m.PendingExports()
	if err != nil {
		return nil, err
	}
	out = append(out, ex...)
	mat, err := m.PendingMaterializations()
	if err != nil {
		return nil, err
	}
	out = append(out, mat...)
	cl, err := m.ContextRecoveryWork()
	if err != nil {
		return nil, err
	}
	out = append(out, cl...)
	ps, err := m.shared.Keys(familyPropagate)
	if err != nil {
		return nil, err
	}
	for _, p := range ps {
		out = append(out, "propagation from "+p)
	}
	return out, nil
}

// GC deletes objects that no workspace history, journal or mount reaches,
// and mount scratch no mount record names (FreeOrphanScratch), first: on
// a full disk that is what makes room for the sweep's own writes.
func (m *Manager) GC() (int64, error) {
	scratch, err := m.FreeOrphanScratch()
	if err != nil {
		return scratch, err
	}
	freed, err := m.gcObjects()
	return scratch + freed, err
}

// MountScratchDir is the directory under the store where the mounts keep
// their state directories (STORE/mounts/WS).
const MountScratchDir = "mounts"

// FreeOrphanScratch removes the state directories under STORE/mounts
// that no mount record names (left by an unmount that could not finish
// removing them): no overlay refers to their upper files. A recorded
// mount's directory stays: its daemon serves it, or the next mount or
// unmount recovers it. It returns the bytes freed. In the daemon it runs
// under the gc lock, so no mount is being set up meanwhile.
func (m *Manager) FreeOrphanScratch() (int64, error) {
	recs, err := m.MountRecords()
	if err != nil {
		return 0, err
	}
	root := filepath.Join(m.dir, MountScratchDir)
	keep := map[string]bool{}
	for _, r := range recs {
		keep[filepath.Clean(r.StateDir)] = true
		keep[filepath.Join(root, r.Workspace)] = true
	}
	ents, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("mount scratch: %w", err)
	}
	var freed int64
	for _, e := range ents {
		p := filepath.Join(root, e.Name())
		if keep[p] {
			continue
		}
		n := treeBytes(p)
		if err := os.RemoveAll(p); err != nil {
			return freed, fmt.Errorf("mount scratch: %w", err)
		}
		freed += n
	}
	return freed, nil
}

// treeBytes is the space the files under p take (what cannot be read
// counts 0).
func treeBytes(p string) int64 {
	var n int64
	_ = filepath.WalkDir(p, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

func (m *Manager) gcObjects() (int64, error) {
	roots := store.IDSet{}
	recs, err := m.MountRecords()
	if err != nil {
		return 0, err
	}
	for _, r := range recs {
		if id, err := store.ParseID(r.Pinned); err == nil {
			roots.Add(id)
		}
	}
	ops, err := m.cs.Keys(familyExport)
	if err != nil {
		return 0, err
	}
	for _, op := range ops {
		var j exportJournal
		if _, found, err := m.cs.Load(familyExport, op, &j); err == nil && found {
			roots.Add(j.Gen)
		}
	}
	// What in-place directories hold, and interrupted materializations
	// (their preimages are blobs only the journal names).
	names, err := m.cs.Keys(familyInPlace)
	if err != nil {
		return 0, err
	}
	for _, n := range names {
		if st, _, found, err := m.ip.loadInPlace(n); err == nil && found {
			roots.Add(st.Materialized)
		}
	}
	if names, err = m.cs.Keys(familyMaterialize); err != nil {
		return 0, err
	}
	for _, n := range names {
		var j matJournal
		if _, found, err := m.cs.Load(familyMaterialize, n, &j); err == nil && found {
			roots.Add(j.From)
			roots.Add(j.To)
			for _, e := range j.Edits {
				for _, id := range []store.ID{e.ID, e.Pre} {
					if !id.IsZero() {
						roots.Add(id)
					}
				}
			}
		}
	}
	freed, err := m.st.GC(roots)
	if err != nil {
		return freed, err
	}
	if _, err := m.st.PruneGates(); err != nil {
		return freed, fmt.Errorf("prune lease gates: %w", err)
	}
	if err := m.dropCollectedAttribution(); err != nil {
		return freed, fmt.Errorf("drop attribution of collected generations: %w", err)
	}
	return freed, nil
}

// Fsck verifies every object, reference and journal. It returns the
// problems found; an error means the check itself could not run.
func (m *Manager) Fsck() ([]string, error) {
	probs, err := m.st.Check()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range probs {
		out = append(out, fmt.Sprintf("%s %s: %s", p.Kind, p.Object, p.Detail))
	}
	txs, err := m.cs.PendingTransactions()
	if err != nil {
		out = append(out, "core state: "+err.Error())
	}
	for _, t := range txs {
		out = append(out, "pending transaction "+t+" (recovered by the next command)")
	}
	for _, fam := range []string{familyMounts, familyExport, familyPropagate} {
		cs := m.cs
		if fam == familyPropagate {
			cs = m.shared
		}
		keys, err := cs.Keys(fam)
		if err != nil {
			out = append(out, fmt.Sprintf("core state %s: %v", fam, err))
			continue
		}
		for _, k := range keys {
			var v map[string]any
			if _, _, err := cs.Load(fam, k, &v); err != nil {
				out = append(out, fmt.Sprintf("core state %s/%s: %v", fam, k, err))
			}
		}
	}
	out = append(out, m.checkContexts()...)
	ws, err := m.st.ListWorkspaces()
	if err != nil {
		return out, err
	}
	for _, w := range ws {
		if _, err := m.Conflicts(w.Name); err != nil {
			out = append(out, fmt.Sprintf("conflict record of %s: %v", w.Name, err))
		}
	}
	return out, nil
}
