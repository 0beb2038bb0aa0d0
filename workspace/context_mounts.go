package workspace

import "fmt"

// Contexts and mounts (docs/contexts.md "Mounted roots"): a workspace that
// is a root of a frozen or discarded context is served read-only by the
// daemon, and no new lease is opened on its mount.

// ReadOnlyRootOf reports whether ws is a root of a frozen or discarded
// context, and names the first such context (by name order). A workspace
// in no context, or only in active ones, is writable.
func (m *Manager) ReadOnlyRootOf(ws string) (context string, readOnly bool, err error) {
	cs, err := m.ListContexts()
	if err != nil {
		return "", false, fmt.Errorf("contexts of %s: %w", ws, err)
	}
	for _, c := range cs {
		if c.State == ContextActive || !c.HasRoot(ws) {
			continue
		}
		return c.Name, true, nil
	}
	return "", false, nil
}
