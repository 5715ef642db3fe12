/* zcrpc — symbol visibility. The library is built with hidden visibility;
 * only declarations marked ZCRPC_API are exported. */
#ifndef ZCRPC_EXPORT_H
#define ZCRPC_EXPORT_H

#if defined(__GNUC__) && defined(ZCRPC_BUILDING)
#define ZCRPC_API __attribute__((visibility("default")))
#else
#define ZCRPC_API
#endif

#endif /* ZCRPC_EXPORT_H */
