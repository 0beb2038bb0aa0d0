package gitmerge

import (
	"fmt"
	"os"
	"time"
)

var traceStart = time.Now()

func trace(what string) {
	if os.Getenv("GITMERGE_TRACE") != "" {
		fmt.Fprintf(os.Stderr, "%8.1fms %s\n", float64(time.Since(traceStart).Microseconds())/1000, what)
	}
}
