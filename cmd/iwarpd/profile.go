package main

import (
	"fmt"
	"os"
	"runtime/pprof"
)

// startCPUProfile starts the -cpuprofile CPU profile (runtime/pprof) into
// path and returns the function that stops it and closes the file; the
// daemon calls it on a clean shutdown (SIGTERM/SIGINT), so a killed daemon
// leaves an empty file. path "" profiles nothing. See docs/iwarpd.md.
func startCPUProfile(path string) (stop func() error, err error) {
	if path == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("-cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("-cpuprofile %s: %w", path, err)
	}
	return func() error {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			return fmt.Errorf("-cpuprofile %s: %w", path, err)
		}
		return nil
	}, nil
}
