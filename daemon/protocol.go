package daemon

import "github.com/acyclicfs/acyclicfs/internal/fsmhook"

// The CLI talks to the per-store daemon over STORE/daemon.sock with
// HTTP+JSON: POST /run carries a RunRequest (a whole command line) and
// returns a RunResponse (what the command printed, its exit code);
// POST /fsmonitor an FSMonitorRequest; GET /ping answers "ok". The daemon
// runs a forwarded command through Config.Exec against its open store,
// so commands behave identically with or without a daemon.

// The daemon's files in the store directory.
const (
	SocketName = "daemon.sock"
	PIDName    = "daemon.pid"
	LogName    = "daemon.log"
	LockName   = "daemon.lock"
)

// ReadyNote starts a line a starting daemon writes on its ready pipe
// before "ready\n" (or its error): something the user should know, such
// as a killed daemon's connections it aborted (ReapDead). The CLI prints
// it without the prefix.
const ReadyNote = "note: "

// RunRequest is a forwarded invocation.
type RunRequest struct {
	Args      []string `json:"args"`
	Cwd       string   `json:"cwd"`
	StderrTTY bool     `json:"stderr_tty"`
	ClientPID int      `json:"client_pid"`
	// GitEnv is the client's git identity and configuration variables:
	// git commands run by the daemon use them, so that a publish's commit
	// has the client's author.
	GitEnv []string `json:"git_env,omitempty"`
}

// RunResponse is what the daemon printed and the exit code.
type RunResponse struct {
	Stdout []byte `json:"stdout"`
	Stderr []byte `json:"stderr"`
	Code   int    `json:"code"`
}

// FSMonitorRequest asks the daemon about the mount at Mountpoint (git's
// fsmonitor hook, docs/git.md): the hook's own type (internal/fsmhook).
type FSMonitorRequest = fsmhook.Request
