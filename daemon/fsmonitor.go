package daemon

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/acyclicfs/acyclicfs/fusefs"
)

// handleFSMonitor answers a hook's query from the mount's overlay. It
// takes no workspace lock: a reconcile in progress must not stall git.
func (d *Daemon) handleFSMonitor(w http.ResponseWriter, r *http.Request) {
	var req FSMonitorRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var mnt *fusefs.Mount
	d.mu.Lock()
	for _, s := range d.mounts {
		if s == nil || s.mnt == nil {
			continue
		}
		// By device where both sides know it (a path may differ by a
		// symlink); a device names one live mount on the machine.
		if s.dev != "" && req.Dev != "" && s.dev == req.Dev || (s.dev == "" || req.Dev == "") && s.mp == req.Mountpoint {
			mnt = s.mnt
		}
	}
	d.mu.Unlock()
	if mnt == nil {
		http.Error(w, "no mount at "+req.Mountpoint, http.StatusNotFound)
		return
	}
	ans := mnt.FSMonitor(req.Token, req.Prefix)
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(ans); err != nil && !errors.Is(err, http.ErrHandlerTimeout) {
		d.logger.Printf("fsmonitor answer to %s: %v", req.Mountpoint, err)
	}
}
