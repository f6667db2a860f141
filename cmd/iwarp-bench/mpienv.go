package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
)

// The ranks' environment from iwarp-bench's own (docs/benchmarks.md "MPI
// ranks' environment"). mpilaunch starts every job from BaseEnv, which
// drops FI_*, IWARPD_* and OMPI_* so that only what the job says
// configures it; a provider setting a user exported before running the
// bench (FI_IWARPD_FASTPATH_RDM=0, FI_IWARPD_EAGER_MAX=...) would then be
// measured as the default without a word, while the bench's other
// sections (fi_pingpong, iwarp-perf) do inherit it. So the provider's and
// libiwverbs' variables pass through to every rank, named at the start of
// the section; -mpi-env still wins for a variable it names.

// rankEnvPrefixes are the variables that pass through: the provider's
// parameters (fi_param_define in c/prov/iwd_init.c, FI_IWARPD_*) and
// libiwverbs' (IWARPD_*, c/include/iwarpd/verbs.h).
var rankEnvPrefixes = []string{"FI_IWARPD_", "IWARPD_"}

// rankEnvDaemon are the variables that name a daemon: the bench runs its
// own daemons and gives each node's ranks the node's socket, so these are
// not passed.
var rankEnvDaemon = map[string]bool{"FI_IWARPD_SOCKET": true, "IWARPD_SOCKET": true}

// inheritRankEnv returns the VAR=VALUE of environ that pass through to the
// ranks (sorted), and the ones left out with why. A variable explicit
// (-mpi-env) names is left to it.
func inheritRankEnv(environ, explicit []string) (pass, left []string) {
	set := map[string]bool{}
	for _, kv := range explicit {
		k, _, _ := strings.Cut(kv, "=")
		set[k] = true
	}
	for _, kv := range environ {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || !hasAnyPrefix(k, rankEnvPrefixes) {
			continue
		}
		switch {
		case rankEnvDaemon[k]:
			left = append(left, k+" (names a daemon: the ranks use the bench's own)")
		case set[k]:
			left = append(left, k+" (-mpi-env sets it)")
		case strings.ContainsAny(kv, " \t\n"):
			left = append(left, k+" (its value has white space, which the ranks' launch cannot carry)")
		default:
			pass = append(pass, kv)
		}
	}
	sort.Strings(pass)
	sort.Strings(left)
	return pass, left
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// reportRankEnv prints, at the start of the MPI section, what the ranks
// get besides the bench's own settings.
func reportRankEnv(m *mpiConfig, progress io.Writer) {
	if len(m.Inherited) > 0 {
		fmt.Fprintf(progress, "[mpi] every rank gets from iwarp-bench's environment: %s\n", strings.Join(m.Inherited, " "))
	}
	if len(m.InheritLeft) > 0 {
		fmt.Fprintf(progress, "[mpi] not passed to the ranks: %s\n", strings.Join(m.InheritLeft, "; "))
	}
	if len(m.Env) > 0 {
		fmt.Fprintf(progress, "[mpi] every rank gets (-mpi-env): %s\n", strings.Join(m.Env, " "))
	}
}
