// Package errs holds the sentinels that workspace and its sub-packages
// share: the two whose exit codes the CLI's one switch maps (invalid input
// → 2, busy → 4). Package workspace re-exports them under the same names
// (workspace.ErrInvalidInput is errs.ErrInvalidInput), so errors.Is
// matches either; a sub-package below workspace (contexts) wraps these
// to get the same exit codes without importing workspace.
//
// It owns no state and takes no locks.
package errs

import "errors"

var (
	// ErrInvalidInput is returned for bad arguments: a --from that is not a
	// directory, a malformed generation, an export target that is a file.
	ErrInvalidInput = errors.New("invalid input")
	// ErrBusy is returned when a workspace is mounted or a lock could not be
	// had in time.
	ErrBusy = errors.New("busy")
)
