// Package fsmtoken encodes the tokens acyclicfs hands to git's fsmonitor
// hook protocol (version 2; docs/git.md "fsmonitor"). git keeps the token
// in its index and, at the next status, asks which paths changed since
// it. A token names the state the worktree was in when it was handed out:
//
//	acyclicfs:1:<tree>:<epoch>:<seq>:<c|d>
//
// tree is the hex ID of the tree the mount's view sat on (its lower
// tree); epoch names the overlay instance that handed the token out and
// seq that overlay's sequence number at the time, so the same overlay can
// answer exactly from its own change log; the last field says whether the
// worktree outside .git/ was exactly tree then (c: clean) or had changes
// of its own (d: dirty). A clean token can be answered by any mount of the
// store by comparing trees; a dirty token from another overlay cannot,
// and is answered with "everything may have changed". An epoch of "-"
// names no overlay (a token written with a fresh index, as by
// `create --from-git`).
package fsmtoken

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Prefix starts every token acyclicfs hands out.
const Prefix = "acyclicfs:1:"

// ErrMalformed is returned by Parse for a string that is not a token of
// this version.
var ErrMalformed = errors.New("fsmtoken: malformed token")

// Token is a decoded token.
type Token struct {
	Tree  [32]byte // the view's lower tree
	Epoch string   // overlay instance, "" for none
	Seq   uint64   // the overlay's sequence number (0 without an epoch)
	Clean bool     // the worktree outside .git/ was exactly Tree
}

// CleanAt is the token for a worktree that is exactly tree.
func CleanAt(tree [32]byte) Token { return Token{Tree: tree, Clean: true} }

// String encodes t.
func (t Token) String() string {
	epoch := t.Epoch
	if epoch == "" {
		epoch = "-"
	}
	state := "d"
	if t.Clean {
		state = "c"
	}
	return Prefix + hex.EncodeToString(t.Tree[:]) + ":" + epoch + ":" + strconv.FormatUint(t.Seq, 10) + ":" + state
}

// Parse decodes a token String produced. Anything else (git's own
// "builtin:" tokens, an older version, an empty string) is ErrMalformed.
func Parse(s string) (Token, error) {
	rest, ok := strings.CutPrefix(s, Prefix)
	if !ok {
		return Token{}, fmt.Errorf("%w: %q", ErrMalformed, s)
	}
	f := strings.Split(rest, ":")
	if len(f) != 4 {
		return Token{}, fmt.Errorf("%w: %q", ErrMalformed, s)
	}
	var t Token
	if len(f[0]) != 64 {
		return Token{}, fmt.Errorf("%w: tree %q", ErrMalformed, f[0])
	}
	if _, err := hex.Decode(t.Tree[:], []byte(f[0])); err != nil || strings.ToLower(f[0]) != f[0] {
		return Token{}, fmt.Errorf("%w: tree %q", ErrMalformed, f[0])
	}
	if f[1] != "-" {
		if !validEpoch(f[1]) {
			return Token{}, fmt.Errorf("%w: epoch %q", ErrMalformed, f[1])
		}
		t.Epoch = f[1]
	}
	seq, err := strconv.ParseUint(f[2], 10, 64)
	if err != nil || strconv.FormatUint(seq, 10) != f[2] {
		return Token{}, fmt.Errorf("%w: sequence %q", ErrMalformed, f[2])
	}
	t.Seq = seq
	switch f[3] {
	case "c":
		t.Clean = true
	case "d":
	default:
		return Token{}, fmt.Errorf("%w: state %q", ErrMalformed, f[3])
	}
	return t, nil
}

// validEpoch: 1 to 64 lower-case letters and digits.
func validEpoch(e string) bool {
	if e == "" || len(e) > 64 {
		return false
	}
	for i := 0; i < len(e); i++ {
		c := e[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'z') {
			return false
		}
	}
	return true
}
