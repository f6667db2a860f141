/*
 * iwd_session.c — the provider's connection to the daemon: a libiwverbs
 * session (c/include/iwarpd/verbs.h iwv_open) opened with the
 * FI_IWARPD_SOCKET and FI_IWARPD_TIMEOUT_MS parameters (docs/libfabric.md),
 * for fi_getinfo (the device's attributes) and each fabric.
 */
#include <stdio.h>

#include "iwd.h"

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
		IWD_INFO(FI_LOG_CORE,
			 "iwarpd: no daemon at %s (%s); start iwarpd or set FI_IWARPD_SOCKET / IWARPD_SOCKET\n", path,
			 iwv_last_error(NULL));
		*s = NULL;
		return iwd_errno(ret);
	}
	return 0;
}
