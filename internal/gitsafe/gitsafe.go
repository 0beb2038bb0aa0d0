// Package gitsafe is what every git process acyclicfs starts runs with,
// so that nothing a workspace (or a repository acyclicfs reads) can write
// makes git run a command: docs/security.md "Git runs nothing a workspace
// configured".
//
// git reads its configuration from the system, the user's global files,
// the repository's own config and whatever those include. The repository's
// config is written by whoever writes the repository — for a repository
// inside a workspace, an agent — and it can name programs for git to run:
// hooks (core.hooksPath, or files under hooks/), core.fsmonitor,
// filter.*.clean/smudge/process, diff.*.textconv, diff.external,
// merge.*.driver, gpg.program and friends, core.sshCommand, core.pager,
// core.editor, core.askPass, credential.helper and the transports. The
// command-line "-c" settings of Args have the highest precedence of all,
// so they win over any file and any include, and Env sets the variables
// that win over configuration. The git commands acyclicfs runs are
// plumbing that applies no filter, textconv or external diff (hash-object
// --no-filters, cat-file without --filters or --textconv, diff-tree and
// diff-index without --ext-diff or --textconv), so the attribute-named
// programs need no setting here; merges of git directories run in a
// private repository whose configuration acyclicfs writes.
package gitsafe

import "os"

// settings are the "-c" pairs of Args.
var settings = []string{
	// No hook runs: hooks/ of the repository, or a core.hooksPath it
	// names, are never looked at.
	"core.hooksPath=" + os.DevNull,
	// No fsmonitor: the daemon's own core.fsmonitor in a workspace's
	// .git/config is for the user's git inside the mount.
	"core.fsmonitor=false",
	// No signing and no signature checks, so no gpg.program runs.
	"commit.gpgSign=false",
	"tag.gpgSign=false",
	"log.showSignature=false",
	"gpg.program=false",
	"gpg.openpgp.program=false",
	"gpg.x509.program=false",
	"gpg.ssh.program=false",
	"gpg.ssh.defaultKeyCommand=",
	// No transport: acyclicfs's git never fetches or pushes, so a
	// lazy fetch, a remote helper or core.sshCommand cannot start.
	"protocol.allow=never",
	"core.sshCommand=false",
	"credential.helper=",
	"core.askPass=",
	// No pager, no editor, no background maintenance (which could run
	// hooks of its own).
	"core.pager=cat",
	"core.editor=false",
	"sequence.editor=false",
	"gc.auto=0",
	"maintenance.auto=false",
}

// Args returns the "-c key=value" arguments to put before git's
// subcommand: git -c … SUBCOMMAND ARGS.
func Args() []string {
	out := make([]string, 0, 2*len(settings))
	for _, s := range settings {
		out = append(out, "-c", s)
	}
	return out
}

// Command returns Args followed by args: the whole argument list of one
// git run.
func Command(args ...string) []string {
	return append(Args(), args...)
}

// Env returns the environment variables to add to git's environment (after
// the caller's, so that these win): they override configuration that
// could name a program, and keep git from prompting.
func Env() []string {
	return []string{
		"GIT_TERMINAL_PROMPT=0",
		"GIT_ASKPASS=",
		"SSH_ASKPASS=",
		"GIT_EDITOR=false",
		"GIT_SEQUENCE_EDITOR=false",
		"GIT_PAGER=cat",
		"GIT_NO_LAZY_FETCH=1",
		"GIT_PROTOCOL_FROM_USER=0",
	}
}
