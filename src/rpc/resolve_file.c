/* zcrpc — the "file:PATH" resolver: one "HOST:PORT" or "[V6]:PORT" per
 * line, blank lines and '#' comments ignored; read at start and again
 * when the file changes (its modification time, size or inode, looked at
 * every second and after a backend failed). A file that cannot be read
 * or has a line that does not parse is a failed resolution: the set
 * stays as it was and calls that find no backend say why. */
#include "lb_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define FILE_MAX_BYTES (1 << 20)

struct file_res {
	zcrpc_resolver *r;
	char *path;
	struct stat seen; /* of the last read (read_once) */
	int read_once, missing;
};

static int same_file(const struct stat *a, const struct stat *b)
{
	return a->st_ino == b->st_ino && a->st_dev == b->st_dev &&
	       a->st_size == b->st_size &&
	       a->st_mtim.tv_sec == b->st_mtim.tv_sec &&
	       a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

static void fail(struct file_res *f, const char *fmt, const char *what,
		 int line)
{
	char why[200];

	snprintf(why, sizeof(why), fmt, f->path, what, line);
	zcrpc_resolver_set(f->r, NULL, 0, ZCRPC_UNAVAILABLE, why);
}

/* Parses @text (NUL-terminated) and reports it. */
static void report(struct file_res *f, char *text)
{
	struct parsed {
		zcrpc_address a[ZCRPC_MAX_BACKENDS];
		char hosts[ZCRPC_MAX_BACKENDS][ZCRPC_HOST_MAX + 1];
		char ports[ZCRPC_MAX_BACKENDS][ZCRPC_PORT_MAX + 1];
	} *pa = malloc(sizeof(*pa));
	zcrpc_address *a;
	char *line = text, *next, *e;
	size_t n = 0;
	int lineno = 0;

	if (!pa) {
		fail(f, "%s: %s%.0d", "out of memory", 0);
		return;
	}
	a = pa->a;
	for (; line; line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = 0;
		lineno++;
		if ((e = strchr(line, '#')))
			*e = 0;
		while (*line == ' ' || *line == '\t' || *line == '\r')
			line++;
		e = line + strlen(line);
		while (e > line && (e[-1] == ' ' || e[-1] == '\t' ||
				    e[-1] == '\r'))
			*--e = 0;
		if (!*line)
			continue;
		if (n == ZCRPC_MAX_BACKENDS) {
			fail(f, "%s: %s (line %d)", "more than 1024 servers",
			     lineno);
			free(pa);
			return;
		}
		if (zcrpc__target_parse_hostport(line, strlen(line), -1,
						 pa->hosts[n], pa->ports[n])) {
			fail(f, "%s: %s (line %d)",
			     "a line is not HOST:PORT or [V6]:PORT", lineno);
			free(pa);
			return;
		}
		a[n].host = pa->hosts[n];
		a[n].port = pa->ports[n];
		n++;
	}
	zcrpc_resolver_set(f->r, a, n, ZCRPC_OK, NULL);
	free(pa);
}

/* Reads the file again when it changed since the last read. */
static void file_refresh(void *state, void *arg)
{
	struct file_res *f = state;
	struct stat st;
	FILE *fp;
	char *text;
	size_t got;

	(void)arg;
	if (stat(f->path, &st) != 0) {
		if (!f->missing) { /* said once, until it is back */
			fail(f, "cannot read %s: %s%.0d", strerror(errno), 0);
			f->missing = 1;
			f->read_once = 0;
		}
		return;
	}
	f->missing = 0;
	if (f->read_once && same_file(&st, &f->seen))
		return;
	if (st.st_size > FILE_MAX_BYTES) {
		fail(f, "%s: %s%.0d", "larger than 1 MiB", 0);
		f->seen = st;
		f->read_once = 1;
		return;
	}
	fp = fopen(f->path, "r");
	text = malloc((size_t)st.st_size + 1);
	if (!fp || !text) {
		fail(f, "cannot read %s: %s%.0d",
		     fp ? "out of memory" : strerror(errno), 0);
		if (fp)
			fclose(fp);
		free(text);
		return;
	}
	got = fread(text, 1, (size_t)st.st_size, fp);
	fclose(fp);
	text[got] = 0;
	f->seen = st;
	f->read_once = 1;
	report(f, text);
	free(text);
}

static zcrpc_status file_start(zcrpc_resolver *r, const char *name,
			       void **state, void *arg)
{
	struct file_res *f;

	(void)arg;
	if (!*name)
		return ZCRPC_INVALID_ARGUMENT;
	f = calloc(1, sizeof(*f));
	if (!f || !(f->path = strdup(name))) {
		free(f);
		return ZCRPC_RESOURCE_EXHAUSTED;
	}
	f->r = r;
	file_refresh(f, NULL);
	*state = f;
	return ZCRPC_OK;
}

static void file_stop(void *state, void *arg)
{
	struct file_res *f = state;

	(void)arg;
	free(f->path);
	free(f);
}

const zcrpc_resolver_ops zcrpc__resolve_file = {
	sizeof(zcrpc_resolver_ops), "file", file_start, file_refresh,
	file_stop, NULL, 1000};
