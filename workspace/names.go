package workspace

import "github.com/acyclicfs/acyclicfs/store"

// ValidateName checks a workspace name against SPEC.md's rule (1–128 bytes
// of [A-Za-z0-9._-], not starting with '.' or '-'). The store enforces the
// same rule on every record it writes; this is the one implementation.
func ValidateName(name string) error { return store.ValidWorkspaceName(name) }
