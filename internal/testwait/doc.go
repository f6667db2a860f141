// Package testwait is the one place tests stretch their timeouts on slow or
// loaded machines: IWARPD_TEST_TIMEOUT_SCALE, a factor such as 2 or 1.5
// (default 1; README.md). Every test of the module scales its waits with
// Scaled, directly or through test/daemontest.Scaled; a timeout only stops
// a hang, no test asserts a wall-clock time. It imports nothing of the
// project, so that any package's tests can use it (ofverbs's and the wire
// layers' own, which test/daemontest's importers cannot be).
package testwait
