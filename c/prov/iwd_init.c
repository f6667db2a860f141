/*
 * iwd_init.c — the provider's entry point (fi_provider(7): a dl-loaded
 * provider exports fi_prov_ini) and its FI_IWARPD_* parameters.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "iwd.h"

struct iwd_params iwd_env = {
	.socket = NULL,
	.eager_max = 65536, /* docs/libfabric.md "Eager or rendezvous" */
	.rx_bufs = 256,
	.staging = 64u << 20,
	.dgram_max = 65536,
	.progress_thread = 0,
	.timeout_ms = 2000,
	.atomic_adopt = 1,
	.mr_cache = 64,
	.idle_mode = IWD_IDLE_ADAPTIVE,
	.idle_sleep_us = IWD_IDLE_SLEEP_US,
	.idle_block_us = IWD_IDLE_BLOCK_US,
	.dgram_crc = 1,
	.fastpath = 1,
	.fastpath_rdm = 1,
	.cts = 1,
	.cts_wait_us = 0,
	.cts_credit = 1,
};

#ifndef IWD_BUILD
#define IWD_BUILD "unknown"
#endif
/* Which build this file is (git describe, from prov.mk): logged at info
 * when the provider loads, and read from the installed file by
 * scripts/install-provider.sh, which says what make install replaced. */
__attribute__((used)) static const char iwd_build[] = "iwarpd-fi build " IWD_BUILD;

static void iwd_cleanup(void) {}

struct fi_provider iwd_prov = {
	.version = IWD_PROV_VERSION,
	.fi_version = IWD_FI_VERSION,
	.name = IWD_PROV_NAME,
	.getinfo = iwd_getinfo,
	.fabric = iwd_fabric_open,
	.cleanup = iwd_cleanup,
};

int iwd_errno(int err)
{
	if (err >= 0)
		return err;
	switch (-err) {
	case ENOMEM:
	case EDQUOT: /* a per-user limit of the daemon (its message names it): out of
		      * a resource, as the verbs provider's ENOMEM at RLIMIT_MEMLOCK */
		return -FI_ENOMEM;
	case EAGAIN:
		return -FI_EAGAIN;
	case EINVAL:
		return -FI_EINVAL;
	case ENODEV:
	case ECONNRESET:
	case EPIPE:
		return -FI_ENODEV;
	case ETIMEDOUT:
		return -FI_ETIMEDOUT;
	case EBUSY:
		return -FI_EBUSY;
	case ENOENT:
		return -FI_ENOENT;
	case EACCES:
	case EPERM:
		return -FI_EACCES;
	case EPROTO:
		return -FI_EOTHER; /* another ABI version of the daemon */
	case ECONNREFUSED:
		return -FI_ECONNREFUSED;
	case EADDRINUSE:
		return -FI_EADDRINUSE;
	case ENOSYS:
	case EOPNOTSUPP:
		return -FI_ENOSYS;
	case EMSGSIZE:
		return -FI_EMSGSIZE;
	case EFAULT:
		return -FI_EFAULT;
	case ENOSPC:
		return -FI_ENOSPC;
	case EHOSTUNREACH:
	case ENETUNREACH:
		return -FI_EHOSTUNREACH;
	case ECONNABORTED:
		return -FI_ECONNABORTED;
	default:
		return -FI_EOTHER;
	}
}

static void iwd_size_param(const char *name, size_t *v)
{
	size_t x;
	if (fi_param_get_size_t(&iwd_prov, name, &x) == FI_SUCCESS)
		*v = x;
}

FI_EXT_INI
{
	int b;
	char *s = NULL;

	fi_param_define(&iwd_prov, "socket", FI_PARAM_STRING,
			"The iwarpd daemon's control socket (default: $IWARPD_SOCKET, else the daemon's default path)");
	fi_param_define(&iwd_prov, "eager_max", FI_PARAM_SIZE_T,
			"RDM: messages up to this many octets go eagerly; larger ones by rendezvous with RDMA Read (default 65536)");
	fi_param_define(&iwd_prov, "rx_bufs", FI_PARAM_SIZE_T,
			"RDM: bounce receive buffers kept posted per endpoint (default 256)");
	fi_param_define(&iwd_prov, "staging", FI_PARAM_SIZE_T,
			"Octets of registered staging memory per domain for rendezvous of unregistered buffers (default 64 MiB)");
	fi_param_define(&iwd_prov, "dgram_max", FI_PARAM_SIZE_T,
			"DGRAM: largest message; DGRAM and MSG: size of a bounce slot, one per operation tx_attr->size + 16 and rx_attr->size allow (default 65536, at most the daemon's max_msg_ud)");
	fi_param_define(&iwd_prov, "progress_thread", FI_PARAM_BOOL,
			"Run a progress thread per domain so that rendezvous steps advance while the application computes (default no)");
	fi_param_define(&iwd_prov, "timeout_ms", FI_PARAM_INT,
			"How long to wait for the daemon to answer when opening a session (default 2000)");
	fi_param_define(&iwd_prov, "atomic_adopt", FI_PARAM_BOOL,
			"In a domain with FI_ATOMIC, move the pages of an MR with FI_REMOTE_WRITE into shared memory in "
			"place so that it can be an atomic target (default yes; docs/libfabric.md)");
	fi_param_define(&iwd_prov, "mr_cache", FI_PARAM_SIZE_T,
			"Registrations of unregistered send buffers a domain keeps for reuse by later rendezvous "
			"sends (default 64; 0: register per send only when staging is busy; docs/libfabric.md)");

	fi_param_define(&iwd_prov, "idle", FI_PARAM_STRING,
			"What a thread does after an empty poll of a CQ, poll set or counter: adaptive (yield "
			"until the CPU is seen contended, then sleep), yield (sched_yield) or sleep (nanosleep) "
			"(default adaptive; docs/libfabric.md)");
	fi_param_define(&iwd_prov, "idle_sleep_us", FI_PARAM_INT,
			"Microseconds of one such sleep, 0 to " IWD_STR(IWD_IDLE_SLEEP_MAX_US) " (default " IWD_STR(
				IWD_IDLE_SLEEP_US) "; docs/libfabric.md)");
	fi_param_define(&iwd_prov, "idle_block_us", FI_PARAM_INT,
			"In adaptive mode, the longest an empty fi_cq_read blocks on the completion channel while "
			"everything the domain waits for is the daemons' work (a bulk transfer), 0 to " IWD_STR(
				IWD_IDLE_BLOCK_MAX_US) " (default " IWD_STR(IWD_IDLE_BLOCK_US) ": never blocks, "
							   "yields as before; e.g. 1000; docs/libfabric.md)");

	fi_param_define(&iwd_prov, "dgram_crc", FI_PARAM_BOOL,
			"CRC32c on the datagrams of RDM and DGRAM endpoints (default yes). Every rank of a job "
			"must set it alike: a peer with the other setting drops this one's datagrams, and "
			"sends to it fail with \"transport retry counter exceeded\" (docs/libfabric.md)");
	fi_param_define(&iwd_prov, "fastpath", FI_PARAM_BOOL,
			"DGRAM: while the application polls, read and send on the endpoint's UD socket in the "
			"application instead of through the daemon, which takes over when polling stops (default yes; "
			"docs/libfabric.md \"The fast path\")");
	fi_param_define(&iwd_prov, "fastpath_rdm", FI_PARAM_BOOL,
			"RDM: while the application polls, send and receive small eager messages on the endpoint's "
			"RD socket in the application, the daemon keeping retransmission; such a send completes when the "
			"kernel accepted it, as tcp's (default yes; "
			"docs/libfabric.md \"The fast path\")");
	fi_param_define(&iwd_prov, "cts", FI_PARAM_BOOL,
			"RDM: a large tagged receive directed at one peer offers the peer its staging, so that the "
			"daemons move a rendezvous while both ranks compute (default yes; docs/libfabric.md "
			"\"Progress while both ranks compute\")");
	fi_param_define(&iwd_prov, "cts_wait_us", FI_PARAM_INT,
			"RDM: microseconds a rendezvous send waits for the receiver's offer when the last offer crossed "
			"its RTS (0, the default: never waits; docs/libfabric.md)");
	fi_param_define(&iwd_prov, "cts_credit", FI_PARAM_BOOL,
			"RDM: keep a standing landing zone (credit) out to every peer that sent a rendezvous, so that "
			"its next large tagged send is written by the daemons even before the receive is posted "
			"(default yes; needs cts; docs/libfabric.md \"Progress while both ranks compute\")");

	if (fi_param_get_str(&iwd_prov, "socket", &s) == FI_SUCCESS && s && *s)
		iwd_env.socket = s;
	iwd_size_param("eager_max", &iwd_env.eager_max);
	iwd_size_param("rx_bufs", &iwd_env.rx_bufs);
	iwd_size_param("staging", &iwd_env.staging);
	iwd_size_param("dgram_max", &iwd_env.dgram_max);
	iwd_size_param("mr_cache", &iwd_env.mr_cache);
	if (fi_param_get_bool(&iwd_prov, "progress_thread", &b) == FI_SUCCESS)
		iwd_env.progress_thread = b;
	if (fi_param_get_int(&iwd_prov, "timeout_ms", &b) == FI_SUCCESS && b > 0)
		iwd_env.timeout_ms = b;
	if (fi_param_get_bool(&iwd_prov, "atomic_adopt", &b) == FI_SUCCESS)
		iwd_env.atomic_adopt = b;
	if (fi_param_get_bool(&iwd_prov, "dgram_crc", &b) == FI_SUCCESS)
		iwd_env.dgram_crc = b;
	if (fi_param_get_bool(&iwd_prov, "fastpath", &b) == FI_SUCCESS)
		iwd_env.fastpath = b;
	if (fi_param_get_bool(&iwd_prov, "fastpath_rdm", &b) == FI_SUCCESS)
		iwd_env.fastpath_rdm = b;
	if (fi_param_get_bool(&iwd_prov, "cts", &b) == FI_SUCCESS)
		iwd_env.cts = b;
	if (fi_param_get_int(&iwd_prov, "cts_wait_us", &b) == FI_SUCCESS && b >= 0 && b <= 1000000)
		iwd_env.cts_wait_us = b;
	if (fi_param_get_bool(&iwd_prov, "cts_credit", &b) == FI_SUCCESS)
		iwd_env.cts_credit = b;
	s = NULL;
	if (fi_param_get_str(&iwd_prov, "idle", &s) == FI_SUCCESS && s && *s) {
		if (!strcmp(s, "yield"))
			iwd_env.idle_mode = IWD_IDLE_YIELD;
		else if (!strcmp(s, "sleep"))
			iwd_env.idle_mode = IWD_IDLE_SLEEP;
		else if (!strcmp(s, "adaptive"))
			iwd_env.idle_mode = IWD_IDLE_ADAPTIVE;
		else
			IWD_WARN(FI_LOG_CORE, "iwarpd: FI_IWARPD_IDLE=%s is none of adaptive, yield, sleep; using adaptive\n", s);
	}
	if (fi_param_get_int(&iwd_prov, "idle_sleep_us", &b) == FI_SUCCESS)
		iwd_env.idle_sleep_us = b < 0 ? 0 : b > IWD_IDLE_SLEEP_MAX_US ? IWD_IDLE_SLEEP_MAX_US : b;
	if (fi_param_get_int(&iwd_prov, "idle_block_us", &b) == FI_SUCCESS)
		iwd_env.idle_block_us = b < 0 ? 0 : b > IWD_IDLE_BLOCK_MAX_US ? IWD_IDLE_BLOCK_MAX_US : b;
	if (iwd_env.rx_bufs < 8)
		iwd_env.rx_bufs = 8;
	if (iwd_env.eager_max < 64)
		iwd_env.eager_max = 64;
	IWD_INFO(FI_LOG_CORE, "iwarpd: provider loaded: %s\n", iwd_build);
	if (!iwd_env.dgram_crc)
		IWD_INFO(FI_LOG_CORE, "iwarpd: FI_IWARPD_DGRAM_CRC off: RDM and DGRAM endpoints send and check no CRC32c; "
				      "every rank of the job must set it alike\n");
	return &iwd_prov;
}
