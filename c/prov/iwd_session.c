/*
 * iwd_session.c — the provider's connection to the daemon: a libiwverbs
 * session (c/include/iwarpd/verbs.h iwv_open) opened with the
 * FI_IWARPD_SOCKET and FI_IWARPD_TIMEOUT_MS parameters (docs/libfabric.md),
 * for fi_getinfo (the device's attributes) and each fabric.
 */
#include <stdio.h>

#include "iwd.h"

/* warn_no_daemon says, at FI_LOG_WARN and once per process (fi_getinfo runs
 * this for every query, Open MPI queries many times), why no session opened:
 * the socket path, the variables that name it and the command that starts
 * the daemon (docs/mpi.md "Troubleshooting"). Without it a user saw only
 * Open MPI's "PML cm cannot be selected". Later failures stay at info. */
static void warn_no_daemon(const char *path, const char *why)
{
	static int warned;
	if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED)) {
		IWD_WARN(FI_LOG_CORE,
			 "iwarpd: the provider is unusable: no iwarpd daemon answers at %s (%s). Start one with "
			 "`iwarpd -socket %s` (or `systemctl start iwarpd`), or name a running daemon's socket in "
			 "FI_IWARPD_SOCKET (else IWARPD_SOCKET); docs/mpi.md \"Troubleshooting\"\n",
			 path, why, path);
		return;
	}
	IWD_INFO(FI_LOG_CORE, "iwarpd: no daemon at %s (%s); start iwarpd or set FI_IWARPD_SOCKET / IWARPD_SOCKET\n",
		 path, why);
}

int iwd_session_open(struct iwv_session **s)
{
	struct iwv_open_attr a = {
		.socket = iwd_env.socket,
		.client_name = NULL,
		.hello_timeout_ms = iwd_env.timeout_ms,
	};
	int ret = iwv_open(&a, s);
	if (ret) {
		char path[256] = "";
		if (iwd_env.socket)
			snprintf(path, sizeof(path), "%s", iwd_env.socket);
		else
			iwv_default_socket(path, sizeof(path));
		warn_no_daemon(path, iwv_last_error(NULL));
		*s = NULL;
		return iwd_errno(ret);
	}
	return 0;
}
