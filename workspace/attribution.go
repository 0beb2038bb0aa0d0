package workspace

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/acyclicfs/acyclicfs/store"
)

// Write attribution and the session log (docs/format.md "Attribution
// records"). Both live on the metadata plane, beside the trees, never in
// them: trees stay content-addressed.
//
//   - meta/attribution/<generation id>: the Attribution of the capture
//     that produced the generation: which processes of which sessions
//     changed which paths.
//   - meta/sessions/<workspace>\x00<start ns, 20 digits>\x00<lease id>:
//     one SessionEntry per lease (tool session, exec, lease begin).
//
// The daemon writes a capture's attribution and the entries of the
// window's leases in one transaction after the capture is published; gc
// drops the records of generations it collected.
const (
	nsAttribution = "attribution"
	nsSessions    = "sessions"
)

// Writer is one process that changed a path.
type Writer struct {
	PID  uint32   `json:"pid"`
	Comm string   `json:"comm"`
	Argv []string `json:"argv"`
	// ArgvTruncated: the command line was longer than the bound kept.
	ArgvTruncated bool `json:"argv_truncated,omitempty"`
	// Session is the lease owner the process belonged to ("sid:N").
	Session string `json:"session"`
	// Lease is the id of the lease that session held, if any.
	Lease string `json:"lease,omitempty"`
	// First and Last are the first and last change time (Unix ms).
	First int64 `json:"first"`
	Last  int64 `json:"last"`
}

// PathAttribution is who changed one path in one capture.
type PathAttribution struct {
	Path    string   `json:"path"`
	Writers []Writer `json:"writers"`
}

// Attribution is the record of one captured generation.
type Attribution struct {
	Generation store.ID `json:"generation"`
	Workspace  string   `json:"workspace"`
	Time       int64    `json:"time"` // Unix ms
	// Sessions are the lease ids of the window the capture closed.
	Sessions []string          `json:"sessions"`
	Paths    []PathAttribution `json:"paths"`
}

// SessionEntry is one lease of a workspace's mount: its owner, the
// session leader's command line, when it ran, the outcome of the final
// close that took in its changes and the generation it produced.
type SessionEntry struct {
	Workspace string `json:"workspace"`
	Lease     string `json:"lease"`
	Owner     string `json:"owner"`
	// Kind is "session" (a tool session the mount saw), "exec" or
	// "lease" (lease begin).
	Kind   string   `json:"kind"`
	Leader []string `json:"leader"`
	Start  int64    `json:"start"` // Unix ms
	End    int64    `json:"end"`   // Unix ms
	// Outcome is the outcome of the final close that ended the window
	// the lease was part of.
	Outcome   string   `json:"outcome"`
	PathCount int      `json:"path_count"`
	Paths     []string `json:"paths"`
	// Generation is the generation that final close produced; zero when
	// it captured nothing.
	Generation store.ID `json:"generation"`
	// startNS orders entries and keys the record.
	StartNS int64 `json:"start_ns"`
}

func sessionKey(e SessionEntry) string {
	return fmt.Sprintf("%s\x00%020d\x00%s", e.Workspace, e.StartNS, e.Lease)
}

// RecordAttribution stores a capture's attribution (nil: the window
// captured nothing) and the entries of the window's leases, in one
// transaction.
func (m *Manager) RecordAttribution(a *Attribution, entries []SessionEntry) error {
	var recs []store.MetaRecord
	if a != nil {
		b, err := json.Marshal(a)
		if err != nil {
			return fmt.Errorf("attribution of %s: %w", a.Generation.Short(), err)
		}
		recs = append(recs, store.MetaRecord{NS: nsAttribution, Key: a.Generation.String(), Value: b})
	}
	for _, e := range entries {
		b, err := json.Marshal(e)
		if err != nil {
			return fmt.Errorf("session entry %s: %w", e.Lease, err)
		}
		recs = append(recs, store.MetaRecord{NS: nsSessions, Key: sessionKey(e), Value: b})
	}
	if len(recs) == 0 {
		return nil
	}
	return m.st.PutMetas(recs)
}

// Attribution returns the record of generation gen; false if none.
func (m *Manager) Attribution(gen store.ID) (Attribution, bool, error) {
	b, err := m.st.GetMeta(nsAttribution, gen.String())
	if errors.Is(err, store.ErrNotFound) {
		return Attribution{}, false, nil
	}
	if err != nil {
		return Attribution{}, false, err
	}
	var a Attribution
	if err := json.Unmarshal(b, &a); err != nil {
		return Attribution{}, false, fmt.Errorf("attribution of %s: %w: %v", gen.Short(), store.ErrCorrupt, err)
	}
	return a, true, nil
}

// attributions lists every attribution record of workspace ws.
func (m *Manager) attributions(ws string) ([]Attribution, error) {
	all, err := m.st.ListMeta(nsAttribution)
	if err != nil {
		return nil, err
	}
	var out []Attribution
	for k, v := range all {
		var a Attribution
		if err := json.Unmarshal(v, &a); err != nil {
			return nil, fmt.Errorf("attribution %s: %w: %v", k, store.ErrCorrupt, err)
		}
		if a.Workspace == ws {
			out = append(out, a)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Time > out[j].Time })
	return out, nil
}

// historyAttributions lists the attribution records of the generations
// in head's history, newest first.
func (m *Manager) historyAttributions(head store.ID) ([]Attribution, error) {
	gens, err := m.ancestry(head, nil)
	if err != nil {
		return nil, err
	}
	var out []Attribution
	for id := range gens {
		a, ok, err := m.Attribution(id)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, a)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Time > out[j].Time })
	return out, nil
}

// Sessions returns ws's session log, newest first (n <= 0: all). With
// ancestors it includes the entries of other workspaces (the ones ws was
// forked from, and what landed or was rebased into ws) whose generation
// is in the history of ws's head.
func (m *Manager) Sessions(ws string, n int, ancestors bool) ([]SessionEntry, error) {
	w, err := m.Get(ws)
	if err != nil {
		return nil, err
	}
	var hist map[store.ID]bool
	if ancestors {
		if hist, err = m.ancestry(w.Head, nil); err != nil {
			return nil, err
		}
	}
	all, err := m.st.ListMeta(nsSessions)
	if err != nil {
		return nil, err
	}
	out := []SessionEntry{}
	prefix := ws + "\x00"
	for k, v := range all {
		own := strings.HasPrefix(k, prefix)
		if !own && !ancestors {
			continue
		}
		var e SessionEntry
		if err := json.Unmarshal(v, &e); err != nil {
			return nil, fmt.Errorf("session entry %q: %w: %v", k, store.ErrCorrupt, err)
		}
		if own || hist[e.Generation] {
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].StartNS > out[j].StartNS })
	if n > 0 && len(out) > n {
		out = out[:n]
	}
	return out, nil
}

// BlameEntry is one generation that changed a path, with who changed it.
type BlameEntry struct {
	Generation store.ID `json:"generation"`
	Workspace  string   `json:"workspace"`
	Time       int64    `json:"time"` // Unix ms
	Writers    []Writer `json:"writers"`
	// NotRecorded: the generation is the capture of a mount with
	// attribution off (mount --no-attribution) that changed the path;
	// who changed it was not recorded (Writers is empty, Time is the end
	// of its session-log entry).
	NotRecorded bool `json:"not_recorded,omitempty"`
}

// Blame lists the generations of ws that changed path, newest first,
// with the processes and sessions that wrote it; with ancestors, every
// attributed generation in the history of ws's head (its ancestors'
// captures, and what landed or was rebased into it). A removed path is
// blamed on its remover (and on its directory).
func (m *Manager) Blame(ws, path string, ancestors bool) ([]BlameEntry, error) {
	w, err := m.Get(ws)
	if err != nil {
		return nil, err
	}
	p, err := cleanPath(path)
	if err != nil {
		return nil, err
	}
	var as []Attribution
	if ancestors {
		as, err = m.historyAttributions(w.Head)
	} else {
		as, err = m.attributions(ws)
	}
	if err != nil {
		return nil, err
	}
	out := []BlameEntry{}
	have := map[store.ID]bool{}
	for _, a := range as {
		have[a.Generation] = true
		i, ok := slices.BinarySearchFunc(a.Paths, p, func(pa PathAttribution, p string) int { return strings.Compare(pa.Path, p) })
		if ok {
			out = append(out, BlameEntry{Generation: a.Generation, Workspace: a.Workspace, Time: a.Time, Writers: a.Paths[i].Writers})
		}
	}
	unrec, err := m.unrecordedBlame(ws, p, ancestors, have)
	if err != nil {
		return nil, err
	}
	if len(unrec) > 0 {
		out = append(out, unrec...)
		slices.SortStableFunc(out, func(a, b BlameEntry) int { return cmp.Compare(b.Time, a.Time) })
	}
	return out, nil
}

// unrecordedBlame lists the captures that changed path p and have no
// attribution record though the session log names them: a mount's with
// attribution off. ws's own (with ancestors: every entry in the history
// of its head) except the generations in have.
func (m *Manager) unrecordedBlame(ws, p string, ancestors bool, have map[store.ID]bool) ([]BlameEntry, error) {
	es, err := m.Sessions(ws, 0, ancestors)
	if err != nil {
		return nil, err
	}
	var out []BlameEntry
	for _, e := range es {
		if e.Generation.IsZero() || have[e.Generation] {
			continue
		}
		have[e.Generation] = true
		if _, ok, err := m.Attribution(e.Generation); err != nil {
			return nil, err
		} else if ok {
			continue
		}
		changed, err := m.genChanged(e.Generation, p)
		if err != nil {
			return nil, err
		}
		if changed {
			out = append(out, BlameEntry{Generation: e.Generation, Workspace: e.Workspace, Time: e.End, Writers: []Writer{}, NotRecorded: true})
		}
	}
	return out, nil
}

// genChanged reports whether generation gen changed path p (or, p being
// a directory, something under it) against its first parent.
func (m *Manager) genChanged(gen store.ID, p string) (bool, error) {
	g, err := m.st.GetGeneration(gen)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil // collected
	}
	if err != nil {
		return false, fmt.Errorf("generation %s: %w", gen.Short(), err)
	}
	var parent store.ID
	if len(g.Parents) > 0 {
		parent = g.Parents[0]
	}
	changes, err := m.Diff(parent, gen)
	if err != nil {
		return false, fmt.Errorf("changes of %s: %w", gen.Short(), err)
	}
	for _, c := range changes {
		whole := c.Old == nil || c.New == nil // a name added or removed with what is under it
		if p == "." || c.Path == p || strings.HasPrefix(c.Path, p+"/") || (whole && strings.HasPrefix(p, c.Path+"/")) {
			return true, nil
		}
	}
	return false, nil
}

// cleanPath is a workspace-relative path as attribution records name it.
func cleanPath(p string) (string, error) {
	q := strings.Trim(p, "/")
	for q != "" && strings.HasPrefix(q, "./") {
		q = q[2:]
	}
	if q == "" || q == "." {
		return ".", nil
	}
	for _, part := range strings.Split(q, "/") {
		if part == "" || part == "." || part == ".." {
			return "", fmt.Errorf("%w: path %q", ErrInvalidName, p)
		}
	}
	return q, nil
}

// dropCollectedAttribution deletes the attribution records, and the
// session entries, of generations gc collected, and the session entries
// of removed workspaces (a later workspace of that name starts afresh).
func (m *Manager) dropCollectedAttribution() error {
	all, err := m.st.ListMeta(nsAttribution)
	if err != nil {
		return err
	}
	gone := map[store.ID]bool{}
	for k := range all {
		id, err := store.ParseID(k)
		if err != nil {
			continue
		}
		if ok, err := m.st.HasGeneration(id); err != nil {
			return err
		} else if !ok {
			gone[id] = true
			if err := m.st.DeleteMeta(nsAttribution, k); err != nil {
				return err
			}
		}
	}
	ws, err := m.st.ListWorkspaces()
	if err != nil {
		return err
	}
	live := map[string]bool{}
	for _, w := range ws {
		live[w.Name] = true
	}
	ss, err := m.st.ListMeta(nsSessions)
	if err != nil {
		return err
	}
	for k, v := range ss {
		var e SessionEntry
		if json.Unmarshal(v, &e) == nil && (gone[e.Generation] || !live[e.Workspace]) {
			if err := m.st.DeleteMeta(nsSessions, k); err != nil {
				return err
			}
		}
	}
	return nil
}

// LogEntry is a head history entry with the paths it changed (against
// the entry before it) and the sessions whose captures it brought in: a
// capture's own, a land's landed ones, a rebase's from the parent.
type LogEntry struct {
	store.HeadEntry
	Paths    []string `json:"paths"`
	Sessions []string `json:"sessions,omitempty"`
}

// LogPaths is Log with each entry's changed paths.
func (m *Manager) LogPaths(name string, n int) ([]LogEntry, error) {
	want := n
	if n > 0 {
		n++ // the entry before the last one shown
	}
	es, err := m.Log(name, n)
	if err != nil {
		return nil, err
	}
	out := []LogEntry{}
	for i, e := range es {
		if want > 0 && i >= want {
			break
		}
		var prev store.ID
		if i+1 < len(es) {
			prev = es[i+1].Gen
		}
		changes, err := m.Diff(prev, e.Gen)
		if err != nil {
			return nil, fmt.Errorf("changes of %s: %w", e.Gen.Short(), err)
		}
		le := LogEntry{HeadEntry: e, Paths: make([]string, 0, len(changes))}
		for _, c := range changes {
			le.Paths = append(le.Paths, c.Path)
		}
		if le.Sessions, err = m.sessionsBetween(prev, e.Gen); err != nil {
			return nil, err
		}
		out = append(out, le)
	}
	return out, nil
}

// maxAncestry bounds the generations an ancestry walk visits (blame and
// sessions --ancestors, log --paths' sessions).
const maxAncestry = 100000

// ancestry returns the generations reachable from gen through their
// parents (gen included), stopping at the ones in stop.
func (m *Manager) ancestry(gen store.ID, stop map[store.ID]bool) (map[store.ID]bool, error) {
	seen := map[store.ID]bool{}
	queue := []store.ID{gen}
	for len(queue) > 0 {
		id := queue[0]
		queue = queue[1:]
		if id.IsZero() || seen[id] || stop[id] {
			continue
		}
		if len(seen) >= maxAncestry {
			return nil, fmt.Errorf("history of %s: more than %d generations", gen.Short(), maxAncestry)
		}
		seen[id] = true
		g, err := m.st.GetGeneration(id)
		if errors.Is(err, store.ErrNotFound) {
			continue // collected
		}
		if err != nil {
			return nil, fmt.Errorf("history of %s: %w", gen.Short(), err)
		}
		queue = append(queue, g.Parents...)
	}
	return seen, nil
}

// sessionsBetween lists the lease ids that the captures in gen's history
// but not in prev's attribute: what an entry moving a head from prev to
// gen brought in (a capture's own sessions, a land's landed ones).
func (m *Manager) sessionsBetween(prev, gen store.ID) ([]string, error) {
	stop, err := m.ancestry(prev, nil)
	if err != nil {
		return nil, err
	}
	gens, err := m.ancestry(gen, stop)
	if err != nil {
		return nil, err
	}
	var as []Attribution
	for id := range gens {
		a, ok, err := m.Attribution(id)
		if err != nil {
			return nil, err
		}
		if ok {
			as = append(as, a)
		}
	}
	sort.Slice(as, func(i, j int) bool { return as[i].Time < as[j].Time })
	var out []string
	for _, a := range as {
		for _, s := range a.Sessions {
			if !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
	}
	return out, nil
}
