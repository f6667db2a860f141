/*
 * fi_mr_limit — a registration the daemon refuses by a limit fails
 * fi_mr_reg(3) with -FI_ENOMEM, and the provider's warning (FI_LOG_LEVEL=
 * warn) carries the daemon's reason: which limit, what is in use, the flag
 * that raises it (issue 19, item 8: fabtests' fi_rdm_atomic got -FI_EOTHER,
 * "Unspecified error", when four pairs of one user reached
 * user-max-registered-bytes). What is given back is registrable again.
 *
 * Run against a daemon with -max-registered-bytes 4M and
 * -user-max-registered-bytes 5M (test/libfabric TestRefusedRegistrationSaysWhy,
 * which checks the warnings and the daemon's log):
 *   1. fabric A (a session) registers 3 MiB: ok;
 *   2. A registers 2 MiB more: the session's 4 MiB refuses (user: 5 of 5);
 *   3. fabric B (another session of the same user) registers 3 MiB: the
 *      user's 5 MiB refuses (3 held);
 *   4. A closes its MR; B's 3 MiB now registers.
 *
 *   fi_mr_limit [PROV]     prints "fi_mr_limit: ok" and exits 0, else 1
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_errno.h>

#define FITEST_NAME "fi_mr_limit"
#include "fitest.h"

#define MIB (1 << 20)
#define ACCESS (FI_SEND | FI_RECV | FI_REMOTE_READ | FI_REMOTE_WRITE)

int main(int argc, char **argv)
{
	struct fi_info *hints = fi_allocinfo(), *info;
	struct fid_fabric *fab[2];
	struct fid_domain *dom[2];
	struct fid_mr *mr, *more, *other;
	char *a = calloc(1, 3 * MIB), *b = calloc(1, 2 * MIB), *c = calloc(1, 3 * MIB);
	int ret;

	if (!hints || !a || !b || !c)
		return 1;
	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = FI_MSG | FI_RMA | FI_ATOMIC; /* fi_mr_reg goes through reg_atomic (iwd_mr.c) */
	hints->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_PROV_KEY | FI_MR_ALLOCATED;
	hints->fabric_attr->prov_name = strdup(argc > 1 ? argv[1] : "iwarpd");
	CHECK(fi_getinfo(FI_VERSION(1, 9), NULL, NULL, 0, hints, &info));
	for (int i = 0; i < 2; i++) {
		CHECK(fi_fabric(info->fabric_attr, &fab[i], NULL)); /* a session each */
		CHECK(fi_domain(fab[i], info, &dom[i], NULL));
	}

	CHECK(fi_mr_reg(dom[0], a, 3 * MIB, ACCESS, 0, 0, 0, &mr, NULL));
	fprintf(stderr, FITEST_NAME ": step 2: 2 MiB more in the same session\n");
	ret = fi_mr_reg(dom[0], b, 2 * MIB, ACCESS, 0, 0, 0, &more, NULL);
	EXPECT(ret == -FI_ENOMEM, "2 MiB beyond the session's 4 MiB: fi_mr_reg = %d (%s), want -FI_ENOMEM", ret,
	       fi_strerror(-ret));
	fprintf(stderr, FITEST_NAME ": step 3: 3 MiB in another session\n");
	ret = fi_mr_reg(dom[1], c, 3 * MIB, ACCESS, 0, 0, 0, &other, NULL);
	EXPECT(ret == -FI_ENOMEM, "3 MiB beyond the user's 5 MiB: fi_mr_reg = %d (%s), want -FI_ENOMEM", ret,
	       fi_strerror(-ret));
	if (ret == 0)
		fi_close(&other->fid);

	CHECK(fi_close(&mr->fid));
	CHECK(fi_mr_reg(dom[1], c, 3 * MIB, ACCESS, 0, 0, 0, &other, NULL));
	CHECK(fi_close(&other->fid));

	for (int i = 0; i < 2; i++) {
		fi_close(&dom[i]->fid);
		fi_close(&fab[i]->fid);
	}
	fi_freeinfo(info);
	fi_freeinfo(hints);
	free(a);
	free(b);
	free(c);
	if (failures) {
		fprintf(stderr, FITEST_NAME ": %d failures\n", failures);
		return 1;
	}
	printf(FITEST_NAME ": ok\n");
	return 0;
}
