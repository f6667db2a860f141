// Package eventfd wraps Linux eventfds, the doorbells of iwarpd: a client
// rings the daemon's engine, and the daemon signals a completion channel.
//
// Imports: the standard library and golang.org/x/sys only.
package eventfd
