// Package captures finds the project's reference captures for tests:
// shared/captures (Linux siw and real iWARP traffic, see its README), which
// live in the project's shared directory beside the checkout, not in the
// repository. A test that needs them and runs where they are absent (a
// plain clone) skips, saying where it looked and what to do.
package captures
