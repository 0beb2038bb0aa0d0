package store

// Watcher tells which directories of an attached base directory's tree
// changed since a point (internal/dirwatch's Watcher is one). The store
// watches a directory of a base while it expands a reference to it, and
// reports the watcher (ExpansionWatch) to the layer above, which decides
// from its events what to list again. The store itself does not import
// an implementation: the layer above supplies one (Options.Watchers).
type Watcher interface {
	// Add watches the directory open as fd under path and returns the
	// sequence number from which the watch reports events.
	Add(path string, fd int) (since uint64, err error)
	// Sync reads the events so far and returns the current sequence number.
	Sync() (uint64, error)
	// Quiet reports whether path was watched at seq and had no event since
	// (self: only events changing the directory's own lstat count).
	Quiet(path string, seq uint64, self bool) bool
	// QuietSince is Quiet for a watch that may have been added after seq.
	QuietSince(path string, seq uint64, self bool) bool
	// Watching reports how many directories are watched and the events
	// read so far.
	Watching() (dirs int, events int64)
	// Close releases the watcher.
	Close() error
}

// Watchers makes the change watchers of attached bases.
type Watchers interface {
	// Supported reports whether every change to the file system holding
	// the open directory fd is reported to a watcher.
	Supported(fd int) bool
	// New returns a watcher holding at most max watches.
	New(max int) (Watcher, error)
}
