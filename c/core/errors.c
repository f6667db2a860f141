/* errors.c — negative errnos and the last-error text (docs/c-client.md). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

static __thread char open_err[512] = "no error";
static __thread char copy[512];

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
		pthread_mutex_lock(&s->errmu);
		ret = vset(s->err, sizeof s->err, err, fmt, ap);
		pthread_mutex_unlock(&s->errmu);
	}
	va_end(ap);
	return ret;
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
	pthread_mutex_lock(&s->errmu);
	memcpy(copy, s->err, sizeof copy);
	pthread_mutex_unlock(&s->errmu);
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
