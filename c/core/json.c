/*
 * json.c — message bodies through jansson (RFC 8259 JSON as Go's
 * encoding/json writes it), and base64 for []byte fields (Go encodes them
 * with the standard alphabet and padding, RFC 4648 §4).
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "internal.h"

json_t *iwvi_jparse(const uint8_t *body, size_t len)
{
	json_error_t jerr;
	if (len == 0)
		return NULL;
	return json_loadb((const char *)body, len, JSON_DECODE_ANY, &jerr);
}

uint64_t iwvi_jget_u64(json_t *o, const char *key)
{
	json_t *v = o ? json_object_get(o, key) : NULL;
	if (!v || !json_is_integer(v))
		return 0;
	json_int_t i = json_integer_value(v);
	return i < 0 ? 0 : (uint64_t)i;
}

int iwvi_jget_bool(json_t *o, const char *key)
{
	json_t *v = o ? json_object_get(o, key) : NULL;
	return v && json_is_true(v);
}

void iwvi_jget_str(json_t *o, const char *key, char *buf, size_t len)
{
	json_t *v = o ? json_object_get(o, key) : NULL;
	const char *str = v && json_is_string(v) ? json_string_value(v) : "";
	if (len == 0)
		return;
	size_t n = strlen(str);
	if (n >= len)
		n = len - 1;
	memcpy(buf, str, n);
	buf[n] = 0;
}

int iwvi_jset_u64(json_t *o, const char *key, uint64_t v)
{
	if (v > (uint64_t)INT64_MAX)
		return -EINVAL;
	return json_object_set_new(o, key, json_integer((json_int_t)v)) ? -ENOMEM : 0;
}

int iwvi_jset_str(json_t *o, const char *key, const char *v)
{
	json_t *s = json_string(v);
	if (!s)
		return -EINVAL; /* not UTF-8 */
	return json_object_set_new(o, key, s) ? -ENOMEM : 0;
}

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int iwvi_jset_bytes(json_t *o, const char *key, const void *data, size_t n)
{
	const uint8_t *p = data;
	char out[4 * ((IWV_MAX_PRIVATE_DATA + 2) / 3) + 1];
	size_t i, j = 0;
	if (n > IWV_MAX_PRIVATE_DATA)
		return -EINVAL;
	for (i = 0; i + 2 < n; i += 3) {
		uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
		out[j++] = b64[v >> 18];
		out[j++] = b64[(v >> 12) & 63];
		out[j++] = b64[(v >> 6) & 63];
		out[j++] = b64[v & 63];
	}
	if (i < n) {
		uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0);
		out[j++] = b64[v >> 18];
		out[j++] = b64[(v >> 12) & 63];
		out[j++] = i + 1 < n ? b64[(v >> 6) & 63] : '=';
		out[j++] = '=';
	}
	out[j] = 0;
	return iwvi_jset_str(o, key, out);
}

static int b64val(char c)
{
	const char *p = c ? strchr(b64, c) : NULL;
	return p ? (int)(p - b64) : -1;
}

int iwvi_jget_bytes(json_t *o, const char *key, uint8_t *buf, size_t cap)
{
	json_t *v = o ? json_object_get(o, key) : NULL;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_string(v))
		return -1;
	const char *s = json_string_value(v);
	size_t len = json_string_length(v), n = 0;
	if (len % 4 != 0)
		return -1;
	for (size_t i = 0; i < len; i += 4) {
		int a = b64val(s[i]), b = b64val(s[i + 1]);
		int c = s[i + 2] == '=' ? -2 : b64val(s[i + 2]);
		int d = s[i + 3] == '=' ? -2 : b64val(s[i + 3]);
		if (a < 0 || b < 0 || c == -1 || d == -1 || (c == -2 && d != -2) || ((c == -2 || d == -2) && i + 4 != len))
			return -1;
		uint32_t w = (uint32_t)a << 18 | (uint32_t)b << 12 | (uint32_t)(c < 0 ? 0 : c) << 6 | (uint32_t)(d < 0 ? 0 : d);
		uint8_t tmp[3] = {(uint8_t)(w >> 16), (uint8_t)(w >> 8), (uint8_t)w};
		size_t k = c < 0 ? 1 : d < 0 ? 2 : 3;
		if (n + k > cap)
			return -1;
		memcpy(buf + n, tmp, k);
		n += k;
	}
	return (int)n;
}
