package workspace

// checkContexts is ContextStore.Check as fsck lines (Manager.Fsck's hook).
func (m *Manager) checkContexts() []string {
	probs, err := m.Contexts().Check()
	if err != nil {
		return []string{"contexts: " + err.Error()}
	}
	return probs
}
