package rebase

import (
	"fmt"

	"github.com/acyclicfs/acyclicfs/store"
)

// contentMode is how the content of a regular file that both sides changed
// is merged, from its merge attribute as git's ll_merge chooses a driver.
type contentMode int

const (
	modeText   contentMode = iota // unset, "merge", "merge=text", unknown driver
	modeBinary                    // "-merge", "binary", "merge=binary": never merged
	modeUnion                     // "merge=union"
	modeDriver                    // "merge=NAME" with Options.Driver set
)

// builtinMode is the built-in driver of a name; git falls back to the text
// merge for a name it has no driver for.
func builtinMode(name string) contentMode {
	switch name {
	case "binary":
		return modeBinary
	case "union":
		return modeUnion
	}
	return modeText
}

// contentMode looks up path's merge attribute. name is the driver name of
// "merge=NAME". Like git, a configured custom driver (Options.Driver) is
// asked first even for the built-in names.
func (m *merger) contentMode(path string) (contentMode, string, error) {
	a, err := m.attrs.lookup(path, "merge")
	if err != nil {
		return modeText, "", err
	}
	switch a.state {
	case attrUnset:
		return modeBinary, "", nil
	case attrValue:
		if m.opt.Driver != nil {
			return modeDriver, a.value, nil
		}
		return builtinMode(a.value), a.value, nil
	}
	return modeText, "", nil
}

// mergeContent merges the contents of o and t against b (nil for an
// add/add) in mode. merged nil means nothing could be merged (binary,
// oversized, "-merge"): the path is a conflict that ours stands in for.
// Otherwise merged is the result when clean, else the conflict text
// (markers or a driver's stand-in).
func (m *merger) mergeContent(path string, mode contentMode, name string, b, o, t *store.Entry) (merged []byte, clean bool, err error) {
	switch mode {
	case modeBinary:
		return nil, false, nil
	case modeDriver:
		bc, oc, tc, ok, err := m.readRaw(path, b, o, t)
		if err != nil || !ok {
			return nil, false, err
		}
		merged, clean, ok, err := m.opt.Driver(name, path, bc, oc, tc)
		if err != nil {
			return nil, false, fmt.Errorf("rebase: merge driver %q for %q: %w", name, path, err)
		}
		if ok {
			if merged == nil {
				merged = []byte{}
			}
			return merged, clean, nil
		}
		return m.mergeContent(path, builtinMode(name), name, b, o, t)
	}
	bc, oc, tc, ok, err := m.readSides(path, b, o, t)
	if err != nil || !ok {
		return nil, false, err
	}
	if mode == modeUnion {
		return MergeUnion(bc, oc, tc), true, nil
	}
	merged, clean = MergeText(bc, oc, tc)
	return merged, clean, nil
}

// readRaw reads the blobs for a merge driver: like readSides, but binary
// content is fine. ok is false when a side is too large.
func (m *merger) readRaw(path string, b, o, t *store.Entry) (bc, oc, tc []byte, ok bool, err error) {
	var out [3][]byte
	for i, e := range []*store.Entry{b, o, t} {
		if e == nil {
			continue
		}
		if e.Size > m.lim.MaxTextBytes {
			return nil, nil, nil, false, nil
		}
		data, err := m.r.ReadBlob(e.ID)
		if err != nil {
			return nil, nil, nil, false, fmt.Errorf("rebase: read blob %s at %q: %w", e.ID.Short(), path, err)
		}
		if int64(len(data)) > m.lim.MaxTextBytes {
			return nil, nil, nil, false, nil
		}
		out[i] = data
	}
	return out[0], out[1], out[2], true, nil
}
