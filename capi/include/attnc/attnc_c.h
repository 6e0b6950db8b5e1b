/* attnc's C interface: a stable ABI over the C++ compiler and runtime. */
#ifndef ATTNC_C_H
#define ATTNC_C_H

/*
 * Every function returns an attnc_status. On anything but ATTNC_OK the
 * calling thread's last error message (attnc_last_error) says what is wrong
 * and where, as the C++ exception's message did; nothing was launched then.
 * Handles are opaque and owned by the caller, who releases each with its
 * _release function (releasing NULL does nothing). No C++ exception ever
 * crosses this interface.
 *
 * ATTNC_C_ABI_VERSION changes whenever a declaration here changes
 * incompatibly; attnc_abi_version() says what the loaded library speaks.
 */

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ATTNC_C_ABI_VERSION 1

#if defined(__GNUC__)
#define ATTNC_C_API __attribute__((visibility("default")))
#else
#define ATTNC_C_API
#endif

typedef enum attnc_status {
  ATTNC_OK = 0,
  ATTNC_USER_ERROR = 1,        /* a definition or an input is wrong */
  ATTNC_INVALID_ARGUMENT = 2,  /* a call's argument is wrong (a UserError) */
  ATTNC_NOT_SUPPORTED_YET = 3, /* a planned feature */
  ATTNC_COMPILE_ERROR = 4,     /* NVRTC rejected generated code */
  ATTNC_DRIVER_ERROR = 5,      /* the CUDA driver failed (or is missing) */
  ATTNC_INTERNAL_ERROR = 6     /* a bug in attnc */
} attnc_status;

/* The ABI version of the loaded library (ATTNC_C_ABI_VERSION it was built
 * with). */
ATTNC_C_API int attnc_abi_version(void);

/* The message of the calling thread's last failed call ("" if none). Valid
 * until the thread's next attnc call. */
ATTNC_C_API const char *attnc_last_error(void);

/* A definition: a registered example, or one made by the other entry
 * points (Python tracing, IR JSON, plugins). */
typedef struct attnc_definition attnc_definition;

/* The shipped example named name (as `attnc list` prints them); a
 * UserError listing the known names if there is none. */
ATTNC_C_API attnc_status attnc_definition_from_example(const char *name,
                                                       attnc_definition **out);

/* The names of the shipped examples, separated by '\n', into buf of size
 * size (NUL-terminated). *needed receives the size the text needs with its
 * NUL; a buf too small (or NULL) is filled with nothing but still OK. */
ATTNC_C_API attnc_status attnc_example_names(char *buf, size_t size,
                                             size_t *needed);

/* The definition's name (valid while def lives). */
ATTNC_C_API const char *attnc_definition_name(const attnc_definition *def);

ATTNC_C_API void attnc_definition_release(attnc_definition *def);

#ifdef __cplusplus
}
#endif

#endif /* ATTNC_C_H */
