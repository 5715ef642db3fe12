/* zcrpc-gen - typed zcrpc stubs for the services of one .proto file.
 *
 * Usage: zcrpc-gen DESCRIPTOR_SET PROTO_NAME OUT_DIR
 *
 * DESCRIPTOR_SET is what `protoc-c --include_imports --include_source_info
 * -o F` wrote; PROTO_NAME is the file's name in it (its path relative to
 * the import directory). Writes OUT_DIR/STEM.zcrpc.h and .c next to
 * protoc-c's STEM.pb-c.h: per method a typed synchronous call, a typed
 * asynchronous call and, per service, a registration helper; per
 * streaming method (server, client or bidirectional streaming, over
 * zcrpc/stream.h) a typed start with typed handlers, write, close_send and
 * cancel for the client, and typed handlers, a registration, reply and
 * finish for the server. A service's registration helper serves its unary
 * methods only (protoc-c's service struct, whose stubs protoc-c writes as
 * unary for streaming methods too, cannot serve a stream).
 *
 * protoc-c's C naming is reproduced here (its c_helpers.cc: ToCamel,
 * CamelToLower, CamelToUpper, FullNameTo*), including protobuf-c's file
 * option (pb_c_file).c_package, which renames the C types of a file (each
 * type under the option of the file that defines it). Messages are passed
 * as their first member, whatever (pb_c_msg).base_field_name calls it.
 * Refused with a message, since protoc-c's own output would not work or
 * not compile: optimize_for = CODE_SIZE (no names in protoc-c's
 * descriptors), methods whose lower-case name is a C keyword (protoc-c's
 * handler slot) or protoc-c's service init/descriptor.
 */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "google/protobuf/descriptor.pb-c.h"

#include "../src/core/fnv.h" /* the method ids it writes (wire format) */

typedef Google__Protobuf__FileDescriptorProto FileProto;
typedef Google__Protobuf__ServiceDescriptorProto ServiceProto;
typedef Google__Protobuf__MethodDescriptorProto MethodProto;
typedef Google__Protobuf__DescriptorProto MessageProto;

/* The descriptor set being read: the file and everything it imports. */
static const Google__Protobuf__FileDescriptorSet *g_set;

/* ---- a growable string ---------------------------------------------------- */

struct str {
	char *p;
	size_t len, cap;
};

static void die_oom(void)
{
	fprintf(stderr, "zcrpc-gen: out of memory\n");
	exit(2);
}

static void sputc(struct str *s, char c)
{
	if (s->len + 2 > s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 256;
		char *p = realloc(s->p, cap);

		if (!p)
			die_oom();
		s->p = p;
		s->cap = cap;
	}
	s->p[s->len++] = c;
	s->p[s->len] = '\0';
}

static void sputs(struct str *s, const char *t)
{
	while (*t)
		sputc(s, *t++);
}

/* Allocates, so s->p is a string even when nothing is added. */
static void sinit(struct str *s)
{
	sputc(s, 'x');
	s->p[s->len = 0] = '\0';
}

static void sprintf_(struct str *s, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void sprintf_(struct str *s, const char *fmt, ...)
{
	va_list ap;
	int n;
	char *buf;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0 || !(buf = malloc((size_t)n + 1)))
		die_oom();
	va_start(ap, fmt);
	vsnprintf(buf, (size_t)n + 1, fmt, ap);
	va_end(ap);
	sputs(s, buf);
	free(buf);
}

/* ---- protoc-c's naming ---------------------------------------------------- */

/* foo_bar -> FooBar */
static void to_camel(struct str *s, const char *name, size_t n)
{
	int next_upper = 1;

	for (size_t i = 0; i < n; i++) {
		if (name[i] == '_') {
			next_upper = 1;
		} else if (next_upper) {
			sputc(s, (char)toupper((unsigned char)name[i]));
			next_upper = 0;
		} else {
			sputc(s, name[i]);
		}
	}
}

/* GetHTTPThing -> get_httpthing (lower) or GET_HTTPTHING (upper) */
static void camel_to(struct str *s, const char *name, size_t n, int upper)
{
	int was_upper = 1;

	for (size_t i = 0; i < n; i++) {
		int is_upper = isupper((unsigned char)name[i]) != 0;

		if (is_upper && !was_upper)
			sputc(s, '_');
		sputc(s, (char)(upper ? toupper((unsigned char)name[i])
				      : tolower((unsigned char)name[i])));
		was_upper = is_upper;
	}
}

enum style { CNAME, LOWER, UPPER };

/* A dotted full name ("pkg.Msg", leading dot allowed) in protoc-c's style. */
static char *full_name(const char *full, enum style st)
{
	struct str s = {0};
	const char *p = full;

	sinit(&s);
	while (*p) {
		const char *dot = strchr(p, '.');
		size_t n = dot ? (size_t)(dot - p) : strlen(p);

		if (n) {
			if (s.len)
				sputs(&s, "__");
			if (st == CNAME)
				to_camel(&s, p, n);
			else
				camel_to(&s, p, n, st == UPPER);
		}
		p += n;
		if (*p == '.')
			p++;
	}
	return s.p;
}

static char *camel(const char *name, enum style st)
{
	struct str s = {0};

	sinit(&s);
	camel_to(&s, name, strlen(name), st == UPPER);
	return s.p;
}

/* ---- protobuf-c's options and the files of types ----------------------- */

/* A varint at *p (below end); 0 when it runs past end. */
static int read_varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
	*v = 0;
	for (int shift = 0; *p < end && shift < 64; shift += 7) {
		uint8_t b = *(*p)++;

		*v |= (uint64_t)(b & 0x7f) << shift;
		if (!(b & 0x80))
			return 1;
	}
	return 0;
}

/* Field 6 (c_package, a string) of a ProtobufCFileOptions message. */
static int c_package_in(const uint8_t *p, size_t len, const uint8_t **val,
			size_t *vlen)
{
	const uint8_t *end = p + len;
	int found = 0;
	uint64_t key, n;

	while (p < end && read_varint(&p, end, &key)) {
		switch (key & 7) {
		case 0:
			if (!read_varint(&p, end, &n))
				return found;
			break;
		case 1:
			p += 8;
			break;
		case 5:
			p += 4;
			break;
		case 2:
			if (!read_varint(&p, end, &n) || n > (uint64_t)(end - p))
				return found;
			if (key >> 3 == 6) {
				*val = p;
				*vlen = (size_t)n;
				found = 1;
			}
			p += n;
			break;
		default:
			return found;
		}
	}
	return found;
}

/* The (pb_c_file).c_package of @f (a heap string), or NULL without one.
 * The extension (FileOptions field 1019) is among the unknown fields of
 * descriptor.proto's own FileOptions; the last occurrence wins. */
static char *c_package(const FileProto *f)
{
	const uint8_t *val = NULL;
	size_t vlen = 0;
	int found = 0;
	char *out;

	if (!f->options)
		return NULL;
	for (size_t i = 0; i < f->options->base.n_unknown_fields; i++) {
		const ProtobufCMessageUnknownField *u = &f->options->base.unknown_fields[i];
		const uint8_t *p = u->data, *end = u->data + u->len;
		uint64_t n;

		/* protobuf-c keeps the field's bytes with their length prefix */
		if (u->tag == 1019 && u->wire_type == PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED &&
		    read_varint(&p, end, &n) && n <= (uint64_t)(end - p) &&
		    c_package_in(p, (size_t)n, &val, &vlen))
			found = 1;
	}
	if (!found)
		return NULL;
	if (!(out = malloc(vlen + 1)))
		die_oom();
	memcpy(out, val, vlen);
	out[vlen] = '\0';
	return out;
}

/* A message named by the dotted path @rel ("Outer.Inner") among @msgs. */
static int has_message(MessageProto *const *msgs, size_t n, const char *rel)
{
	const char *dot = strchr(rel, '.');
	size_t len = dot ? (size_t)(dot - rel) : strlen(rel);

	for (size_t i = 0; i < n; i++) {
		const MessageProto *m = msgs[i];

		if (!m->name || strlen(m->name) != len || strncmp(m->name, rel, len) != 0)
			continue;
		if (!dot)
			return 1;
		if (has_message(m->nested_type, m->n_nested_type, dot + 1))
			return 1;
	}
	return 0;
}

/* The file of the set that defines message @type (".pkg.Msg"), or NULL. */
static const FileProto *file_of_type(const char *type)
{
	const char *full = type[0] == '.' ? type + 1 : type;

	for (size_t i = 0; i < g_set->n_file; i++) {
		const FileProto *f = g_set->file[i];
		const char *pkg = f->package ? f->package : "";
		size_t pl = strlen(pkg);
		const char *rel = full;

		if (pl) {
			if (strncmp(full, pkg, pl) != 0 || full[pl] != '.')
				continue;
			rel = full + pl + 1;
		}
		if (has_message(f->message_type, f->n_message_type, rel))
			return f;
	}
	return NULL;
}

/* protoc-c's name for @full ("pkg.Name", leading dot allowed) defined in @f:
 * its OverrideFullName() (the package replaced by the file's c_package),
 * then FullNameToC/Lower/Upper. */
static char *c_name(const FileProto *f, const char *full, enum style st)
{
	const char *pkg = f && f->package ? f->package : "";
	char *cpkg = f ? c_package(f) : NULL;
	struct str s = {0};
	char *out;

	if (full[0] == '.')
		full++;
	if (!cpkg)
		return full_name(full, st);
	sputs(&s, cpkg);
	if (!*pkg)
		sputc(&s, '.');
	sputs(&s, full + strlen(pkg));
	out = full_name(s.p, st);
	free(s.p);
	free(cpkg);
	return out;
}

/* A message type's name in protoc-c's style, under its own file's options. */
static char *type_name(const char *type, enum style st)
{
	return c_name(file_of_type(type), type, st);
}

static int code_size(const FileProto *f)
{
	return f && f->options && f->options->has_optimize_for &&
	       f->options->optimize_for ==
		       GOOGLE__PROTOBUF__FILE_OPTIONS__OPTIMIZE_MODE__CODE_SIZE;
}

/* ---- reading the descriptor set ------------------------------------------- */

static uint8_t *read_all(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf = NULL;
	size_t cap = 0, n = 0;

	if (!f)
		return NULL;
	for (;;) {
		if (n == cap) {
			uint8_t *p;

			cap = cap ? cap * 2 : 65536;
			if (!(p = realloc(buf, cap)))
				die_oom();
			buf = p;
		}
		size_t r = fread(buf + n, 1, cap - n, f);

		n += r;
		if (r == 0)
			break;
	}
	if (ferror(f)) {
		fclose(f);
		free(buf);
		return NULL;
	}
	fclose(f);
	*len = n;
	return buf;
}

/* The line (1-based) of service @si method @mi, or 0 when unknown. */
static int method_line(const FileProto *fp, size_t si, size_t mi)
{
	const Google__Protobuf__SourceCodeInfo *sci = fp->source_code_info;

	if (!sci)
		return 0;
	for (size_t i = 0; i < sci->n_location; i++) {
		const Google__Protobuf__SourceCodeInfo__Location *l = sci->location[i];

		/* FileDescriptorProto.service = 6, ServiceDescriptorProto.method = 2 */
		if (l->n_path == 4 && l->path[0] == 6 && (size_t)l->path[1] == si &&
		    l->path[2] == 2 && (size_t)l->path[3] == mi && l->n_span >= 1)
			return l->span[0] + 1;
	}
	return 0;
}

/* ---- emitting ------------------------------------------------------------- */

static const char kWhoFrees[] =
	"/*\n"
	" * Who frees what:\n"
	" * - Requests stay the caller's. Both calls pack them before returning,\n"
	" *   so they may be freed or changed as soon as the call returns.\n"
	" * - X__Y__call() waits for the reply. On OK *reply is the caller's:\n"
	" *   free it with the reply type's __free_unpacked(*reply, NULL). On an\n"
	" *   error *reply is NULL and *message (if message is not NULL) is a heap\n"
	" *   string the caller frees with free().\n"
	" * - X__Y__async() returns at once; done runs exactly once, from\n"
	" *   zcrpc_worker_progress() of the channel's worker, unless the call\n"
	" *   returns an error (then never). Its reply is the library's, valid\n"
	" *   only during done (copy what you keep), and NULL unless status is\n"
	" *   OK; message is \"\" on OK.\n"
	" * - Call options (o, may be NULL) carry the deadline, metadata and\n"
	" *   attachments (zcrpc_call_opts); what they point to is the caller's.\n"
	" * - X__zcrpc_register() serves impl (built with protoc-c's X__INIT) on\n"
	" *   a server; impl must outlive the server. A method whose handler is\n"
	" *   NULL answers UNIMPLEMENTED (\"pkg.Svc.M is not implemented\").\n"
	" *   Handlers call closure(reply, closure_data) exactly once, now or\n"
	" *   later; the reply stays the handler's (it is packed and copied), the\n"
	" *   request is freed after the closure ran. closure(NULL, ...) answers\n"
	" *   with the status given to zcrpc_pb_set_status(), INTERNAL otherwise;\n"
	" *   zcrpc_pb_reply_error(closure_data, status, message) does both.\n"
	" *   zcrpc_pb_set_reply_md() sets the reply's metadata (copied);\n"
	" *   X__zcrpc_register_opts() gives the handlers a context\n"
	" *   (zcrpc_pb_server_get_ctx(closure_data)).\n"
	" * - Inside done, zcrpc_pb_get_reply_md() reads the reply's initial and\n"
	" *   trailing metadata (the library's, valid only during done).\n"
	" */\n";

/* One method's declarations (@h) and stubs (@c) in service @full. */
static void emit_method(const char *full, const char *svc_c,
			const char *svc_lower, const char *svc_upper,
			const MethodProto *mp, struct str *h, struct str *c)
{
	char *in_c = type_name(mp->input_type, CNAME);
	char *out_c = type_name(mp->output_type, CNAME);
	char *out_lower = type_name(mp->output_type, LOWER);
	char *m_camel = NULL, *m_lower = camel(mp->name, LOWER),
	     *m_upper = camel(mp->name, UPPER);
	struct str path = {0}, mc = {0};

	to_camel(&mc, mp->name, strlen(mp->name));
	m_camel = mc.p;
	sprintf_(&path, "/%s/%s", full, mp->name);
	sprintf_(h, "\n/* %s: %s -> %s */\n", path.p, in_c, out_c);
	sprintf_(h, "#define %s__%s__ZCRPC_NAME \"%s\"\n", svc_upper, m_upper,
		 path.p);
	sprintf_(h, "#define %s__%s__ZCRPC_ID 0x%08xu\n", svc_upper, m_upper,
		 zcrpc__fnv1a(path.p));
	sprintf_(h,
		 "typedef void (*%s__%s_ZcrpcDone)(zcrpc_status status,\n"
		 "\tconst char *message, const %s *reply, void *arg);\n",
		 svc_c, m_camel, out_c);
	sprintf_(h,
		 "zcrpc_status %s__%s__call(zcrpc_channel *ch,\n"
		 "\tconst %s *req, const zcrpc_call_opts *o,\n"
		 "\t%s **reply, char **message);\n",
		 svc_lower, m_lower, in_c, out_c);
	sprintf_(h,
		 "zcrpc_status %s__%s__async(zcrpc_channel *ch,\n"
		 "\tconst %s *req, const zcrpc_call_opts *o,\n"
		 "\t%s__%s_ZcrpcDone done, void *arg, zcrpc_call_id *id);\n",
		 svc_lower, m_lower, in_c, svc_c, m_camel);

	sprintf_(c,
		 "\nzcrpc_status %s__%s__call(zcrpc_channel *ch,\n"
		 "\tconst %s *req, const zcrpc_call_opts *o,\n"
		 "\t%s **reply, char **message)\n{\n"
		 "\tProtobufCMessage *m = NULL;\n"
		 "\tzcrpc_status st;\n\n"
		 "\tif (!req || !reply) {\n"
		 "\t\tif (reply)\n\t\t\t*reply = NULL;\n"
		 "\t\tif (message)\n\t\t\t*message = NULL;\n"
		 "\t\treturn ZCRPC_INVALID_ARGUMENT;\n\t}\n"
		 "\tst = zcrpc_pb_call(ch, %s__%s__ZCRPC_ID,\n"
		 "\t\t(const ProtobufCMessage *)req,\n"
		 "\t\t&%s__descriptor, o, &m, message);\n"
		 "\t*reply = (%s *)m;\n"
		 "\treturn st;\n}\n",
		 svc_lower, m_lower, in_c, out_c, svc_upper, m_upper, out_lower,
		 out_c);
	sprintf_(c,
		 "\nstatic void %s__%s__done(zcrpc_status status,\n"
		 "\tconst char *message, const ProtobufCMessage *reply,\n"
		 "\tzcrpc_pb_fn fn, void *arg)\n{\n"
		 "\t((%s__%s_ZcrpcDone)fn)(status, message,\n"
		 "\t\t(const %s *)reply, arg);\n}\n",
		 svc_lower, m_lower, svc_c, m_camel, out_c);
	sprintf_(c,
		 "\nzcrpc_status %s__%s__async(zcrpc_channel *ch,\n"
		 "\tconst %s *req, const zcrpc_call_opts *o,\n"
		 "\t%s__%s_ZcrpcDone done, void *arg, zcrpc_call_id *id)\n{\n"
		 "\tif (!req || !done)\n\t\treturn ZCRPC_INVALID_ARGUMENT;\n"
		 "\treturn zcrpc_pb_call_async(ch, %s__%s__ZCRPC_ID,\n"
		 "\t\t(const ProtobufCMessage *)req,\n"
		 "\t\t&%s__descriptor, o, %s__%s__done,\n"
		 "\t\t(zcrpc_pb_fn)done, arg, id);\n}\n",
		 svc_lower, m_lower, in_c, svc_c, m_camel, svc_upper, m_upper,
		 out_lower, svc_lower, m_lower);
	free(in_c);
	free(out_c);
	free(out_lower);
	free(m_camel);
	free(m_lower);
	free(m_upper);
	free(path.p);
}

static const char kStreams[] =
	"/*\n"
	" * Streaming methods (zcrpc/stream.h: its rules apply, e.g. every call\n"
	" * on the stream's worker thread, on_finish exactly once, the stream\n"
	" * valid until on_finish returns):\n"
	" * - X__Y__start() opens a stream with typed handlers (X__Y_ZcrpcClient,\n"
	" *   copied; on_finish required, other callbacks may be NULL).\n"
	" *   X__Y__write() packs a request straight into registered memory (the\n"
	" *   message stays the caller's), X__Y__close_send() half-closes,\n"
	" *   X__Y__cancel() cancels. A server-streaming method takes one write\n"
	" *   and a close_send; a client-streaming one answers one message.\n"
	" * - X__Y__zcrpc_register() serves a streaming method with impl's typed\n"
	" *   handlers (X__Y_ZcrpcServer; its base is the library's, filled by\n"
	" *   the registration); impl must outlive the server, unchanged.\n"
	" *   X__Y__reply() writes a reply, X__Y__finish() ends the stream with a\n"
	" *   status and trailing metadata.\n"
	" * - A message given to on_message is the library's, valid only during\n"
	" *   the callback (copy what you keep). One that does not unpack ends\n"
	" *   the stream: a server finishes it INTERNAL (\"message does not unpack\n"
	" *   as T\", which both on_finish read); a client cancels it (the server\n"
	" *   reads CANCELLED) and its own on_finish reads INTERNAL.\n"
	" * - arg is the handlers' pointer; per-stream state goes in\n"
	" *   zcrpc_stream_set_user(). Every zcrpc_stream_* function (pause,\n"
	" *   send_headers, can_write, ...) works on the stream given.\n"
	" */\n";

static const char *stream_kind(const MethodProto *mp)
{
	if (mp->client_streaming && mp->server_streaming)
		return "bidirectional streaming";
	return mp->client_streaming ? "client streaming" : "server streaming";
}

/* One streaming method's declarations (@h) and stubs (@c) in service @full:
 * the client's typed start, write, close_send and cancel, the server's
 * typed handlers, registration, reply and finish. */
static void emit_stream(const char *full, const char *svc_c,
			const char *svc_lower, const char *svc_upper,
			const MethodProto *mp, struct str *h, struct str *c)
{
	char *in_c = type_name(mp->input_type, CNAME);
	char *out_c = type_name(mp->output_type, CNAME);
	char *in_lower = type_name(mp->input_type, LOWER);
	char *out_lower = type_name(mp->output_type, LOWER);
	char *m_lower = camel(mp->name, LOWER), *m_upper = camel(mp->name, UPPER);
	struct str path = {0}, mc = {0}, t = {0}, f = {0}, u = {0};

	to_camel(&mc, mp->name, strlen(mp->name));
	sprintf_(&path, "/%s/%s", full, mp->name);
	sprintf_(&t, "%s__%s", svc_c, mc.p);	       /* type prefix */
	sprintf_(&f, "%s__%s", svc_lower, m_lower);    /* function prefix */
	sprintf_(&u, "%s__%s", svc_upper, m_upper);    /* macro prefix */

	sprintf_(h, "\n/* %s: %s%s -> %s%s (%s) */\n", path.p,
		 mp->client_streaming ? "stream " : "", in_c,
		 mp->server_streaming ? "stream " : "", out_c, stream_kind(mp));
	sprintf_(h, "#define %s__ZCRPC_NAME \"%s\"\n", u.p, path.p);
	sprintf_(h, "#define %s__ZCRPC_ID 0x%08xu\n", u.p, zcrpc__fnv1a(path.p));
	sprintf_(h,
		 "typedef void (*%s_ZcrpcOnReply)(zcrpc_stream *s,\n"
		 "\tconst %s *msg, void *arg);\n"
		 "typedef void (*%s_ZcrpcOnRequest)(zcrpc_stream *s,\n"
		 "\tconst %s *msg, void *arg);\n",
		 t.p, out_c, t.p, in_c);
	sprintf_(h,
		 "/* Client: the stream's typed callbacks (zcrpc_stream_handlers'). */\n"
		 "typedef struct %s_ZcrpcClient {\n"
		 "\tvoid (*on_headers)(zcrpc_stream *s, const zcrpc_md *md,\n"
		 "\t\tsize_t n_md, void *arg);\n"
		 "\t%s_ZcrpcOnReply on_message;\n"
		 "\tvoid (*on_writable)(zcrpc_stream *s, void *arg);\n"
		 "\tvoid (*on_finish)(zcrpc_stream *s, const zcrpc_stream_end *end,\n"
		 "\t\tvoid *arg);\n"
		 "\tvoid *arg;\n"
		 "} %s_ZcrpcClient;\n",
		 t.p, t.p, t.p);
	sprintf_(h,
		 "zcrpc_status %s__start(zcrpc_channel *ch,\n"
		 "\tconst zcrpc_stream_opts *o, const %s_ZcrpcClient *h,\n"
		 "\tzcrpc_stream **s);\n"
		 "zcrpc_status %s__write(zcrpc_stream *s, const %s *msg);\n"
		 "zcrpc_status %s__close_send(zcrpc_stream *s);\n"
		 "zcrpc_status %s__cancel(zcrpc_stream *s);\n",
		 f.p, t.p, f.p, in_c, f.p, f.p);
	sprintf_(h,
		 "/* Server: the method's typed callbacks (zcrpc_stream_handlers'). */\n"
		 "typedef struct %s_ZcrpcServer {\n"
		 "\tzcrpc_pb_stream_handlers base; /* the library's */\n"
		 "\tvoid (*on_open)(zcrpc_stream *s, const zcrpc_stream_open *open,\n"
		 "\t\tvoid *arg);\n"
		 "\t%s_ZcrpcOnRequest on_message;\n"
		 "\tvoid (*on_half_close)(zcrpc_stream *s, void *arg);\n"
		 "\tvoid (*on_writable)(zcrpc_stream *s, void *arg);\n"
		 "\tvoid (*on_finish)(zcrpc_stream *s, const zcrpc_stream_end *end,\n"
		 "\t\tvoid *arg);\n"
		 "\tvoid *arg;\n"
		 "} %s_ZcrpcServer;\n",
		 t.p, t.p, t.p);
	sprintf_(h,
		 "zcrpc_status %s__zcrpc_register(zcrpc_server *srv,\n"
		 "\t%s_ZcrpcServer *impl);\n"
		 "zcrpc_status %s__reply(zcrpc_stream *s, const %s *msg);\n"
		 "zcrpc_status %s__finish(zcrpc_stream *s, zcrpc_status status,\n"
		 "\tconst char *message, const zcrpc_md *md, size_t n_md);\n",
		 f.p, t.p, f.p, out_c, f.p);

	/* client */
	sprintf_(c,
		 "\nstatic void %s__on_reply(zcrpc_stream *s,\n"
		 "\tconst ProtobufCMessage *msg, zcrpc_pb_fn fn, void *arg)\n{\n"
		 "\t((%s_ZcrpcOnReply)fn)(s, (const %s *)msg, arg);\n}\n",
		 f.p, t.p, out_c);
	sprintf_(c,
		 "\nzcrpc_status %s__start(zcrpc_channel *ch,\n"
		 "\tconst zcrpc_stream_opts *o, const %s_ZcrpcClient *h,\n"
		 "\tzcrpc_stream **s)\n{\n"
		 "\tzcrpc_pb_stream_handlers g = {.size = sizeof(g),\n"
		 "\t\t.in = &%s__descriptor};\n\n"
		 "\tif (!h)\n\t\treturn ZCRPC_INVALID_ARGUMENT;\n"
		 "\tg.on_headers = h->on_headers;\n"
		 "\tif (h->on_message) {\n"
		 "\t\tg.on_message = %s__on_reply;\n"
		 "\t\tg.on_message_fn = (zcrpc_pb_fn)h->on_message;\n\t}\n"
		 "\tg.on_writable = h->on_writable;\n"
		 "\tg.on_finish = h->on_finish;\n"
		 "\tg.arg = h->arg;\n"
		 "\treturn zcrpc_pb_stream_start(ch, %s__ZCRPC_ID, o, &g, s);\n}\n",
		 f.p, t.p, out_lower, f.p, u.p);
	sprintf_(c,
		 "\nzcrpc_status %s__write(zcrpc_stream *s, const %s *msg)\n{\n"
		 "\treturn zcrpc_pb_stream_write(s, (const ProtobufCMessage *)msg);\n}\n",
		 f.p, in_c);
	sprintf_(c,
		 "\nzcrpc_status %s__close_send(zcrpc_stream *s)\n{\n"
		 "\treturn zcrpc_stream_close_send(s);\n}\n"
		 "\nzcrpc_status %s__cancel(zcrpc_stream *s)\n{\n"
		 "\treturn zcrpc_stream_cancel(s);\n}\n",
		 f.p, f.p);
	/* server */
	sprintf_(c,
		 "\nstatic void %s__on_request(zcrpc_stream *s,\n"
		 "\tconst ProtobufCMessage *msg, zcrpc_pb_fn fn, void *arg)\n{\n"
		 "\t((%s_ZcrpcOnRequest)fn)(s, (const %s *)msg, arg);\n}\n",
		 f.p, t.p, in_c);
	sprintf_(c,
		 "\nzcrpc_status %s__zcrpc_register(zcrpc_server *srv,\n"
		 "\t%s_ZcrpcServer *impl)\n{\n"
		 "\tzcrpc_pb_stream_handlers g = {.size = sizeof(g),\n"
		 "\t\t.in = &%s__descriptor};\n\n"
		 "\tif (!impl)\n\t\treturn ZCRPC_INVALID_ARGUMENT;\n"
		 "\tg.on_open = impl->on_open;\n"
		 "\tif (impl->on_message) {\n"
		 "\t\tg.on_message = %s__on_request;\n"
		 "\t\tg.on_message_fn = (zcrpc_pb_fn)impl->on_message;\n\t}\n"
		 "\tg.on_half_close = impl->on_half_close;\n"
		 "\tg.on_writable = impl->on_writable;\n"
		 "\tg.on_finish = impl->on_finish;\n"
		 "\tg.arg = impl->arg;\n"
		 "\timpl->base = g;\n"
		 "\treturn zcrpc_pb_server_register_stream(srv, %s__ZCRPC_NAME,\n"
		 "\t\t&impl->base);\n}\n",
		 f.p, t.p, in_lower, f.p, u.p);
	sprintf_(c,
		 "\nzcrpc_status %s__reply(zcrpc_stream *s, const %s *msg)\n{\n"
		 "\treturn zcrpc_pb_stream_write(s, (const ProtobufCMessage *)msg);\n}\n",
		 f.p, out_c);
	sprintf_(c,
		 "\nzcrpc_status %s__finish(zcrpc_stream *s, zcrpc_status status,\n"
		 "\tconst char *message, const zcrpc_md *md, size_t n_md)\n{\n"
		 "\treturn zcrpc_stream_finish(s, status, message, md, n_md);\n}\n",
		 f.p);
	free(in_c);
	free(out_c);
	free(in_lower);
	free(out_lower);
	free(m_lower);
	free(m_upper);
	free(path.p);
	free(mc.p);
	free(t.p);
	free(f.p);
	free(u.p);
}

static int streams(const MethodProto *mp)
{
	return mp->client_streaming || mp->server_streaming;
}

/* One service's methods and its registration function. */

/* The body of a service's registration helper in @c:
 * X__zcrpc_register_opts(s, impl, o) when @opts, else X__zcrpc_register(s,
 * impl). A service with streaming methods (@n_stream of them) serves its
 * unary methods only. */
static void emit_register(struct str *c, const ServiceProto *sp,
			  const char *svc_lower, const char *svc_c,
			  size_t n_stream, int opts)
{
	sprintf_(c,
		 "\nzcrpc_status %s__zcrpc_register%s(zcrpc_server *s,\n"
		 "\t%s_Service *impl%s)\n{\n",
		 svc_lower, opts ? "_opts" : "", svc_c,
		 opts ? ", zcrpc_pb_server_opts *o" : "");
	if (n_stream) {
		size_t k = 0;

		sputs(c, "\tstatic const unsigned unary[] = {");
		for (size_t mi = 0; mi < sp->n_method; mi++)
			if (!streams(sp->method[mi]))
				sprintf_(c, "%s%zuu", k++ ? ", " : "", mi);
		sputs(c, "};\n\n");
	}
	sprintf_(c,
		 "\tif (!s || !impl || impl->base.descriptor != "
		 "&%s__descriptor ||\n"
		 "\t    %s__descriptor.n_methods != %zuu%s)\n"
		 "\t\treturn ZCRPC_INVALID_ARGUMENT;\n",
		 svc_lower, svc_lower, sp->n_method,
		 opts ? " || !o" : "");
	if (opts) {
		sputs(c, "\to->service = &impl->base;\n");
		if (n_stream)
			sprintf_(c, "\to->methods = unary;\n\to->n_methods = %zuu;\n",
				 sp->n_method - n_stream);
		else
			sputs(c, "\to->methods = NULL;\n\to->n_methods = 0;\n");
		sputs(c, "\treturn zcrpc_pb_server_register_opts(s, o);\n}\n");
	} else if (n_stream) {
		sprintf_(c,
			 "\treturn zcrpc_pb_server_register_methods(s, &impl->base, "
			 "unary,\n\t\t%zuu);\n}\n",
			 sp->n_method - n_stream);
	} else {
		sputs(c, "\treturn zcrpc_pb_server_register(s, &impl->base);\n}\n");
	}
}

static void emit_service(const FileProto *fp, const ServiceProto *sp,
			 struct str *h, struct str *c)
{
	struct str full = {0};
	char *svc_c, *svc_lower, *svc_upper;
	size_t n_stream = 0;

	if (fp->package && *fp->package)
		sprintf_(&full, "%s.%s", fp->package, sp->name);
	else
		sputs(&full, sp->name);
	svc_c = c_name(fp, full.p, CNAME);
	svc_lower = c_name(fp, full.p, LOWER);
	svc_upper = c_name(fp, full.p, UPPER);

	sprintf_(h, "\n/* ---- service %s ---- */\n", full.p);
	sprintf_(c, "\n/* ---- service %s ---- */\n", full.p);
	for (size_t mi = 0; mi < sp->n_method; mi++) {
		if (streams(sp->method[mi])) {
			emit_stream(full.p, svc_c, svc_lower, svc_upper,
				    sp->method[mi], h, c);
			n_stream++;
		} else {
			emit_method(full.p, svc_c, svc_lower, svc_upper,
				    sp->method[mi], h, c);
		}
	}
	if (n_stream && n_stream == sp->n_method)
		goto out; /* no unary method: nothing for protoc-c's service */

	if (!n_stream)
		sprintf_(h,
			 "\n/* Serves every method of %s on @s (see above); a method "
			 "whose\n"
			 " * handler is NULL answers UNIMPLEMENTED, as in gRPC. "
			 "INVALID_ARGUMENT\n"
			 " * when impl is not a %s service; otherwise as\n"
			 " * zcrpc_pb_server_register(). */\n",
			 full.p, full.p);
	else
		sprintf_(h,
			 "\n/* Serves the unary methods of %s on @s (see above); a "
			 "method whose\n"
			 " * handler is NULL answers UNIMPLEMENTED, as in gRPC. Its "
			 "streaming\n"
			 " * methods are served by their own X__Y__zcrpc_register() "
			 "(impl's\n"
			 " * handler slots for them are never called). INVALID_ARGUMENT "
			 "when\n"
			 " * impl is not a %s service; otherwise as\n"
			 " * zcrpc_pb_server_register(). */\n",
			 full.p, full.p);
	sprintf_(h,
		 "zcrpc_status %s__zcrpc_register(zcrpc_server *s,\n"
		 "\t%s_Service *impl);\n",
		 svc_lower, svc_c);
	sprintf_(h,
		 "/* The same with the handlers' context: o (its size and ctx set by\n"
		 " * the caller) gets impl and the methods served and is registered\n"
		 " * with zcrpc_pb_server_register_opts(), so it must outlive the\n"
		 " * server; handlers read o->ctx with zcrpc_pb_server_get_ctx(). */\n"
		 "zcrpc_status %s__zcrpc_register_opts(zcrpc_server *s,\n"
		 "\t%s_Service *impl, zcrpc_pb_server_opts *o);\n",
		 svc_lower, svc_c);
	emit_register(c, sp, svc_lower, svc_c, n_stream, 1);
	emit_register(c, sp, svc_lower, svc_c, n_stream, 0);
out:
	free(svc_c);
	free(svc_lower);
	free(svc_upper);
	free(full.p);
}

static int emit(const FileProto *fp, const char *stem, struct str *h,
		struct str *c)
{
	struct str guard = {0};

	sputs(&guard, "ZCRPC_GEN_");
	for (const char *p = stem; *p; p++)
		sputc(&guard, isalnum((unsigned char)*p) ? (char)toupper((unsigned char)*p) : '_');
	sputs(&guard, "_ZCRPC_H");

	sprintf_(h, "/* Generated by zcrpc-gen from %s. Do not edit. */\n", fp->name);
	sprintf_(h, "#ifndef %s\n#define %s\n\n", guard.p, guard.p);
	sprintf_(h, "#include <zcrpc/pb.h>\n\n#include \"%s.pb-c.h\"\n\n", stem);
	sputs(h, "#ifdef __cplusplus\nextern \"C\" {\n#endif\n\n");
	sputs(h, kWhoFrees);
	for (size_t si = 0, done = 0; si < fp->n_service && !done; si++)
		for (size_t mi = 0; mi < fp->service[si]->n_method && !done; mi++)
			if (streams(fp->service[si]->method[mi])) {
				sputs(h, kStreams);
				done = 1;
			}

	sprintf_(c, "/* Generated by zcrpc-gen from %s. Do not edit. */\n", fp->name);
	sprintf_(c, "#include \"%s.zcrpc.h\"\n", stem);

	for (size_t si = 0; si < fp->n_service; si++)
		emit_service(fp, fp->service[si], h, c);
	sputs(h, "\n#ifdef __cplusplus\n}\n#endif\n\n");
	sprintf_(h, "#endif /* %s */\n", guard.p);
	free(guard.p);
	return 0;
}

static int write_file(const char *path, const struct str *s)
{
	FILE *f = fopen(path, "wb");

	if (!f || fwrite(s->p, 1, s->len, f) != s->len || fclose(f) != 0) {
		fprintf(stderr, "zcrpc-gen: cannot write %s: %s\n", path, strerror(errno));
		return -1;
	}
	return 0;
}

/* The suffixes zcrpc-gen puts after a method's lower-case name (unary:
 * __call, __async; streaming: the rest), whichever kind the method is. */
static int stub_suffix(const char *rest)
{
	static const char *const sfx[] = {
		"__call", "__async", "__start", "__write", "__close_send",
		"__cancel", "__zcrpc_register", "__reply", "__finish",
		"__on_reply", "__on_request", "__done",
	};

	for (size_t i = 0; i < sizeof(sfx) / sizeof(sfx[0]); i++)
		if (strcmp(rest, sfx[i]) == 0)
			return 1;
	return 0;
}

/* Refuses, with file:line, methods whose generated C names would clash:
 * two methods mapping to the same lower-case or CamelCase name (FooBar and
 * foo_bar), a method X__call, X__async, X__start, ... (stub_suffix) next to
 * a method X (protoc-c's own client function for one is zcrpc-gen's stub
 * for the other), and a method named like the registration helper.
 * Returns the number of clashes. */
static int check_names(const FileProto *fp)
{
	int bad = 0;

	for (size_t si = 0; si < fp->n_service; si++) {
		const ServiceProto *sp = fp->service[si];

		for (size_t a = 0; a < sp->n_method; a++) {
			char *la = camel(sp->method[a]->name, LOWER);
			struct str ca = {0};
			const char *why = NULL;
			size_t other = 0;

			to_camel(&ca, sp->method[a]->name, strlen(sp->method[a]->name));
			if (strcmp(la, "zcrpc_register") == 0)
				why = "the service's registration helper";
			for (size_t b = 0; b < sp->n_method && !why; b++) {
				char *lb;
				struct str cb = {0};
				size_t n;

				if (b == a)
					continue;
				lb = camel(sp->method[b]->name, LOWER);
				to_camel(&cb, sp->method[b]->name, strlen(sp->method[b]->name));
				n = strlen(lb);
				if ((b < a && (strcmp(la, lb) == 0 || strcmp(ca.p, cb.p) == 0)) ||
				    (strncmp(la, lb, n) == 0 && stub_suffix(la + n))) {
					why = "another method";
					other = b;
				}
				free(lb);
				free(cb.p);
			}
			if (why) {
				int line = method_line(fp, si, a);

				if (line)
					fprintf(stderr, "%s:%d: ", fp->name, line);
				else
					fprintf(stderr, "%s: ", fp->name);
				if (other || strcmp(why, "another method") == 0)
					fprintf(stderr, "method %s clashes with method %s in the generated C names\n",
						sp->method[a]->name, sp->method[other]->name);
				else
					fprintf(stderr, "method %s clashes with %s in the generated C names\n",
						sp->method[a]->name, why);
				bad++;
			}
			free(la);
			free(ca.p);
		}
	}
	if (bad)
		fprintf(stderr, "zcrpc-gen: rename the methods; no stubs written\n");
	return bad;
}

/* Where the method is: "file:line: " (or "file: " without source info). */
static void where(const FileProto *fp, size_t si, size_t mi)
{
	int line = method_line(fp, si, mi);

	if (line)
		fprintf(stderr, "%s:%d: ", fp->name, line);
	else
		fprintf(stderr, "%s: ", fp->name);
}

/* C keywords (C11, C23 and GNU C's asm/typeof; true/false/bool are macros
 * with <stdbool.h>): protoc-c names a method's handler slot in the
 * service struct after the method's lower-case name, unchanged. */
static int c_keyword(const char *w)
{
	static const char *const kw[] = {
		"alignas", "alignof", "asm", "auto", "bool", "break", "case", "char",
		"const", "constexpr", "continue", "default", "do", "double", "else",
		"enum", "extern", "false", "float", "for", "goto", "if", "inline",
		"int", "long", "nullptr", "register", "restrict", "return", "short",
		"signed", "sizeof", "static", "static_assert", "struct", "switch",
		"thread_local", "true", "typedef", "typeof", "typeof_unqual", "union",
		"unsigned", "void", "volatile", "while",
	};

	for (size_t i = 0; i < sizeof(kw) / sizeof(kw[0]); i++)
		if (strcmp(w, kw[i]) == 0)
			return 1;
	return 0;
}

/* Refuses what protoc-c's own output for the file gets wrong: a file (or a
 * method's message type from a file) with optimize_for = CODE_SIZE, whose
 * descriptors protoc-c writes without names, so zcrpc_pb_server_register()
 * refuses the service and every call would be UNIMPLEMENTED; a method
 * whose handler slot is a C keyword (Switch: a member "switch"); a method
 * Init or Descriptor, whose protoc-c client function is protoc-c's service
 * initializer or descriptor. Returns the number of problems. */
static int check_protoc_c(const FileProto *fp)
{
	int bad = 0;

	if (fp->n_service && code_size(fp)) {
		fprintf(stderr, "%s: option optimize_for = CODE_SIZE leaves the names out of "
				"the descriptors protoc-c writes, and zcrpc finds services and "
				"methods by name; use SPEED (the default) or LITE_RUNTIME\n",
			fp->name);
		bad++;
	}
	for (size_t si = 0; si < fp->n_service; si++) {
		const ServiceProto *sp = fp->service[si];
		struct str full = {0};
		char *svc_lower;

		if (fp->package && *fp->package)
			sprintf_(&full, "%s.%s", fp->package, sp->name);
		else
			sputs(&full, sp->name);
		svc_lower = c_name(fp, full.p, LOWER);
		for (size_t mi = 0; mi < sp->n_method; mi++) {
			const MethodProto *mp = sp->method[mi];
			char *lower = camel(mp->name, LOWER);
			const char *types[2] = {mp->input_type, mp->output_type};

			if (c_keyword(lower)) {
				where(fp, si, mi);
				fprintf(stderr, "method %s: protoc-c calls its handler slot %s, a C "
						"keyword, so protoc-c's own header does not compile; "
						"rename the method\n",
					mp->name, lower);
				bad++;
			} else if (strcmp(lower, "init") == 0 || strcmp(lower, "descriptor") == 0) {
				where(fp, si, mi);
				fprintf(stderr, "method %s clashes with %s__%s%s, the service %s "
						"protoc-c writes; rename the method\n",
					mp->name, svc_lower, lower, lower[0] == 'i' ? "()" : "",
					lower[0] == 'i' ? "initializer" : "descriptor");
				bad++;
			}
			for (int t = 0; t < 2 && !code_size(fp); t++) {
				const FileProto *tf = file_of_type(types[t]);

				if (!code_size(tf))
					continue;
				where(fp, si, mi);
				fprintf(stderr, "method %s uses %s from %s, which has optimize_for = "
						"CODE_SIZE: protoc-c writes its descriptors without names; "
						"use SPEED (the default) or LITE_RUNTIME there\n",
					mp->name, types[t] + (types[t][0] == '.'), tf->name);
				bad++;
			}
			free(lower);
		}
		free(svc_lower);
		free(full.p);
	}
	return bad;
}

int main(int argc, char **argv)
{
	Google__Protobuf__FileDescriptorSet *set;
	const FileProto *fp = NULL;
	struct str h = {0}, c = {0}, stem = {0}, hp = {0}, cp = {0};
	uint8_t *buf;
	size_t len = 0;
	if (argc != 4) {
		fprintf(stderr, "usage: zcrpc-gen DESCRIPTOR_SET PROTO_NAME OUT_DIR\n");
		return 2;
	}
	if (!(buf = read_all(argv[1], &len))) {
		fprintf(stderr, "zcrpc-gen: cannot read %s: %s\n", argv[1], strerror(errno));
		return 2;
	}
	set = google__protobuf__file_descriptor_set__unpack(NULL, len, buf);
	free(buf);
	if (!set) {
		fprintf(stderr, "zcrpc-gen: %s is not a FileDescriptorSet\n", argv[1]);
		return 2;
	}
	g_set = set;
	for (size_t i = 0; i < set->n_file; i++)
		if (set->file[i]->name && strcmp(set->file[i]->name, argv[2]) == 0)
			fp = set->file[i];
	if (!fp) {
		fprintf(stderr, "zcrpc-gen: %s: no file %s in it\n", argv[1], argv[2]);
		return 2;
	}
	if (check_protoc_c(fp)) {
		fprintf(stderr, "zcrpc-gen: protoc-c's code for %s would not compile or not "
				"work; no stubs written\n", fp->name);
		return 1;
	}
	if (check_names(fp))
		return 1;
	sputs(&stem, fp->name);
	if (stem.len > 6 && strcmp(stem.p + stem.len - 6, ".proto") == 0)
		stem.p[stem.len -= 6] = '\0';
	emit(fp, stem.p, &h, &c);
	sprintf_(&hp, "%s/%s.zcrpc.h", argv[3], stem.p);
	sprintf_(&cp, "%s/%s.zcrpc.c", argv[3], stem.p);
	if (write_file(hp.p, &h) || write_file(cp.p, &c))
		return 2;
	google__protobuf__file_descriptor_set__free_unpacked(set, NULL);
	free(h.p);
	free(c.p);
	free(stem.p);
	free(hp.p);
	free(cp.p);
	return 0;
}
