// Package iwerr is the iWARP TERMINATE error vocabulary shared by every layer:
// the (layer, error type, error code) triples of RFC 5040 §7.2, RFC 5041 §7.2
// (DDP) and RFC 5044 §8 / RFC 6581 §8 (MPA), as registered by IANA through
// RFC 6580 ("RDMAP Errors", "DDP Errors", "MPA Errors" registries).
//
// It is a leaf package: it imports only the standard library, and every wire
// package (rdmap, ddp, mpa, llp) may import it. It does not encode or decode
// the Terminate message itself; that is rdmap's job.
package iwerr
