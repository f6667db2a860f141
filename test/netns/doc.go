// Package netns creates and removes Linux network namespaces for tests, with
// the `ip` tool of iproute2 (run through os/exec; nothing here enters a
// namespace in-process, so the calling process and its threads never change
// namespace).
//
// NewPair makes two namespaces joined by a veth pair, each end with one
// address (use link-local addresses you own, such as 169.254.77.0/24), both
// links up. Command runs a program inside one of them (`ip netns exec`).
// Close deletes both namespaces (which deletes the veth pair with them);
// RemoveStale deletes leftovers of an earlier run by name prefix.
//
// Usable only as root with iproute2 installed: Available says why not, for
// a test to skip with that message.
package netns
