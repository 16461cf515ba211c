// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * --push options, checked while parsing (a bad one stops the run before anything attaches),
 * and handed on to a --cgroup supervisor's children.
 *
 * Names and labels ride in Pyroscope's name parameter, "service{k=v,k=v}", which has no
 * escaping: a value holding ',', '=', '{' or '}' would be cut into other labels, so values
 * keep to characters that cannot be misread.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <curl/curl.h>
#include "options.h"
#include "push.h"

static bool is_tchar(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       (c && strchr("!#$%&'*+-.^_`|~", c));
}

static bool is_value_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       (c && strchr("._:/@+-", c));
}

const char *push_check_url(const char *url)
{
	static const char *const bad = "give the server's base URL, e.g. http://pyroscope:4040";
	CURLU *u = curl_url();
	char *scheme = NULL, *host = NULL, *query = NULL, *frag = NULL;
	const char *why = NULL;

	if (!u)
		return "out of memory";
	if (curl_url_set(u, CURLUPART_URL, url, 0) ||
	    curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) ||
	    curl_url_get(u, CURLUPART_HOST, &host, 0))
		why = bad;
	else if (strcasecmp(scheme, "http") && strcasecmp(scheme, "https"))
		why = "only http:// and https:// URLs are supported";
	else if (!curl_url_get(u, CURLUPART_QUERY, &query, 0) ||
		 !curl_url_get(u, CURLUPART_FRAGMENT, &frag, 0))
		why = "give the base URL without ?query or #fragment (requests go to URL/ingest)";
	curl_free(scheme);
	curl_free(host);
	curl_free(query);
	curl_free(frag);
	curl_url_cleanup(u);
	return why;
}

const char *push_check_header(const char *h)
{
	const char *colon = strchr(h, ':');
	const char *v;

	if (!colon || colon == h)
		return "give 'Name: value', e.g. 'X-Scope-OrgID: tenant'";
	for (const char *p = h; p < colon; p++)
		if (!is_tchar(*p))
			return "the header name has a character HTTP does not allow";
	if (strpbrk(colon, "\r\n"))
		return "the value must be one line";
	for (v = colon + 1; *v == ' ' || *v == '\t'; v++)
		;
	if (!*v)
		return "the value is empty";
	if (!strncasecmp(h, "Content-Type:", 13) || !strncasecmp(h, "Content-Length:", 15))
		return "the tool sets Content-Type and Content-Length itself";
	return NULL;
}

/* A label value: non-empty, characters that Pyroscope's name parameter cannot misread. */
static const char *check_value(const char *v)
{
	if (!*v)
		return "the value is empty";
	for (; *v; v++)
		if (!is_value_char(*v))
			return "values may hold letters, digits and . _ : / @ + - only";
	return NULL;
}

const char *push_check_label(const char *kv)
{
	const char *eq = strchr(kv, '=');

	if (!eq || eq == kv)
		return "give KEY=VALUE, e.g. env=prod";
	if (!((*kv >= 'a' && *kv <= 'z') || (*kv >= 'A' && *kv <= 'Z') || *kv == '_'))
		return "the key must start with a letter or _";
	for (const char *p = kv; p < eq; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		      (*p >= '0' && *p <= '9') || *p == '_'))
			return "the key may hold letters, digits and _ only";
	if (eq - kv == 12 && !strncmp(kv, "service_name", 12))
		return "set the service name with --service NAME";
	if (eq - kv >= 2 && !strncmp(kv, "__", 2))
		return "keys starting with __ are reserved by the server";
	return check_value(eq + 1);
}

const char *push_check_service(const char *name)
{
	return check_value(name);
}

void push_child_argv(const struct push_opts *po, const char *subdir, char **argv, size_t *a,
		     char *buf, size_t buflen)
{
	size_t used = 0;

#define PUT(...)                                                                                   \
	do {                                                                                       \
		int n = snprintf(buf + used, buflen - used, __VA_ARGS__);                          \
		argv[(*a)++] = buf + used;                                                         \
		used += n >= 0 && (size_t)n < buflen - used ? (size_t)n + 1 : buflen - used;       \
	} while (0)
	if (!po->url)
		return;
	argv[(*a)++] = "--push";
	argv[(*a)++] = (char *)po->url;
	argv[(*a)++] = "--push-interval";
	PUT("%u", po->interval_s);
	argv[(*a)++] = "--spool-mb";
	PUT("%llu", (unsigned long long)po->spool_mb);
	if (po->service) {
		argv[(*a)++] = "--service";
		argv[(*a)++] = (char *)po->service;
	}
	for (size_t i = 0; i < po->nlabels; i++) {
		argv[(*a)++] = "--label";
		argv[(*a)++] = (char *)po->labels[i];
	}
	for (size_t i = 0; i < po->nheaders; i++) {
		argv[(*a)++] = "--push-header";
		argv[(*a)++] = (char *)po->headers[i];
	}
	/* Each child its own spool: a spool directory is locked by the run using it. */
	if (po->spool_dir) {
		argv[(*a)++] = "--spool-dir";
		PUT("%s/%s", po->spool_dir, subdir);
	}
#undef PUT
}
