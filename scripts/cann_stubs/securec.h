// ms_kvcache conformance-check stub for <securec.h>.
//
// Stands in for the Huawei "securec" (bounds-checked C library: memcpy_s, memset_s, ...) header
// that an installed CANN provides (include/securec.h, from the c_sec library). The public
// asc-devkit / asc-tools / metadef sources include it but do not contain it. Only declarations are
// needed: the check compiles with -fsyntax-only and never links or runs. Written for
// scripts/check_cann_headers.py; not the real library.
#ifndef MSKV_CANN_STUB_SECUREC_H_
#define MSKV_CANN_STUB_SECUREC_H_
#include <stddef.h>
#include <stdarg.h>
#ifndef EOK
#define EOK 0
#endif
typedef int errno_t;
#ifdef __cplusplus
extern "C" {
#endif
errno_t memcpy_s(void* dest, size_t destMax, const void* src, size_t count);
errno_t memmove_s(void* dest, size_t destMax, const void* src, size_t count);
errno_t memset_s(void* dest, size_t destMax, int c, size_t count);
errno_t strcpy_s(char* dest, size_t destMax, const char* src);
errno_t strncpy_s(char* dest, size_t destMax, const char* src, size_t count);
errno_t strcat_s(char* dest, size_t destMax, const char* src);
errno_t strncat_s(char* dest, size_t destMax, const char* src, size_t count);
int sprintf_s(char* strDest, size_t destMax, const char* format, ...);
int snprintf_s(char* strDest, size_t destMax, size_t count, const char* format, ...);
int vsnprintf_s(char* strDest, size_t destMax, size_t count, const char* format, va_list argList);
int sscanf_s(const char* buffer, const char* format, ...);
#ifdef __cplusplus
}
#endif
#endif
