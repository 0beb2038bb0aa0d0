package workspace

import (
	"github.com/acyclicfs/acyclicfs/internal/dirwatch"
	"github.com/acyclicfs/acyclicfs/store"
)

// baseWatchers gives the store inotify watchers (internal/dirwatch) for
// the bases the daemon attaches: detection answers unchanged directories
// from their events (detect_watch.go).
type baseWatchers struct{}

func (baseWatchers) Supported(fd int) bool { return dirwatch.Supported(fd) }

func (baseWatchers) New(max int) (store.Watcher, error) {
	w, err := dirwatch.New(max)
	if err != nil {
		return nil, err
	}
	return w, nil
}
