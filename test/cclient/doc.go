// Package cclient tests libiwverbs, the C client core of iwarpd (c/core,
// c/include/iwarpd/verbs.h, docs/c-client.md), against real daemons: it
// builds the C library and the test programs of c/tests with
// AddressSanitizer and UBSan (-fsanitize=address,undefined
// -fno-sanitize-recover=all, leak checking on), starts iwarpd processes
// with test/daemontest and runs each program against them: Hello and the
// ABI check, every object, UD/RD/RC data, CM, the completion channel, bad
// input, a daemon killed under a live session, application-owned memory.
//
// The parity test runs the same scenarios through ofverbs (in this test
// binary) and through the C core (c/tests/t_parity.c) against the same
// daemons and compares the completion sequences (wr_id, opcode, status,
// byte_len, flags), so the two clients cannot drift. The ABI test parses
// the C headers and compares their constants with package proto.
//
// Ports: UD blocks of 25 in 27600-27699, RD blocks of 25 in 27700-27799;
// RC listeners use ephemeral ports. The C build needs gcc, make,
// pkg-config and libjansson-dev (scripts/install-build-deps.sh); without
// them the tests skip, naming that script.
package cclient
