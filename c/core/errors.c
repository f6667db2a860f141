/* errors.c — negative errnos and the last-error text (docs/c-client.md). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

static __thread char open_err[512] = "no error";
static __thread char copy[512];

/* The calling thread's last failure on a session: errors are per thread,
 * as errno is, so that one thread's failure is never explained by
 * another's and setting one takes no lock. A fixed text (the expected
 * queue-full of the data path) is stored as a pointer and formatted only
 * when iwv_last_error asks for it. */
static __thread struct {
	const struct iwv_session *s;
	int err;
	const char *fixed; /* NULL: msg holds the formatted text */
	char msg[512];
} last;

static int vset(char *dst, size_t len, int err, const char *fmt, va_list ap)
{
	char msg[400];
	vsnprintf(msg, sizeof msg, fmt, ap);
	snprintf(dst, len, "%s (%s)", msg, strerror(err < 0 ? -err : err));
	return err < 0 ? err : -err;
}

/* seterr records why a call on s fails and returns err as a negative errno. */
int iwvi_seterr(struct iwv_session *s, int err, const char *fmt, ...)
{
	va_list ap;
	int ret;
	va_start(ap, fmt);
	if (!s) {
		ret = vset(open_err, sizeof open_err, err, fmt, ap);
	} else {
		ret = vset(last.msg, sizeof last.msg, err, fmt, ap);
		last.s = s;
		last.fixed = NULL;
	}
	va_end(ap);
	return ret;
}

int iwvi_seterr_fixed(struct iwv_session *s, int err, const char *what)
{
	last.s = s;
	last.err = err < 0 ? -err : err;
	last.fixed = what;
	return err < 0 ? err : -err;
}

int iwvi_seterr_open(int err, const char *fmt, ...)
{
	va_list ap;
	int ret;
	va_start(ap, fmt);
	ret = vset(open_err, sizeof open_err, err, fmt, ap);
	va_end(ap);
	return ret;
}

IWV_EXPORT const char *iwv_last_error(struct iwv_session *s)
{
	if (!s)
		return open_err;
	if (last.s != s)
		snprintf(copy, sizeof copy, "no failure of this thread on this session");
	else if (last.fixed)
		snprintf(copy, sizeof copy, "%s (%s)", last.fixed, strerror(last.err));
	else
		memcpy(copy, last.msg, sizeof copy);
	copy[sizeof copy - 1] = 0;
	return copy;
}

IWV_EXPORT const char *iwv_strerror(int err)
{
	return strerror(err < 0 ? -err : err);
}

IWV_EXPORT int iwv_abi_version(void)
{
	return IWV_ABI_VERSION;
}
