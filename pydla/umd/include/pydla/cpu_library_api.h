/* pydla CPU library ABI: the function types that go with the structs of pydla/cpu_library.h.
 * Written by hand (the structs are generated from specs/cpu_library.yaml; C function-pointer types
 * are not something the spec language describes). This is the C form of XRT's xrt::cpu
 * interface: library_init fills in a lookup function; lookup(name) gives the number of arguments and
 * the function; a function takes the run's arguments as an array in argidx order.
 *
 *   #include "pydla/cpu_library_api.h"
 *   static int32_t twice(const cpu_arg_t *args, uint32_t n, char *msg, uint32_t msg_size) { ... }
 *   static int32_t lookup(const char *name, cpu_lookup_args_t *out) { ... return 0; }
 *   PYDLA_CPU_EXPORT void library_init(cpu_library_init_args_t *args) {
 *       args->lookup_fn = (uint64_t)(uintptr_t)&lookup;
 *   }
 *
 * Error codes a function returns are NvError values (pydla.errors); 0 is success. A library is built
 * with e.g. `cc -shared -fPIC $(python -c 'import pydla.umd.cpu_native as c; print(c.cflags())')`
 * (this header sits apart from the generated ones: it is written by hand). */
#ifndef PYDLA_CPU_LIBRARY_API_H
#define PYDLA_CPU_LIBRARY_API_H

#include "pydla/cpu_library.h"

#if defined(_WIN32)
#define PYDLA_CPU_EXPORT __declspec(dllexport)
#else
#define PYDLA_CPU_EXPORT __attribute__((visibility("default")))
#endif

/* A CPU function: 0 on success, otherwise an NvError code and a NUL-terminated message. */
typedef int32_t (*pydla_cpu_function_t)(const cpu_arg_t *args, uint32_t num_args, char *message,
                                        uint32_t message_size);

/* The lookup function: 0 and *args filled in when the library has `name`, non-zero otherwise. */
typedef int32_t (*pydla_cpu_lookup_t)(const char *name, cpu_lookup_args_t *args);

/* The one exported entry point. */
typedef void (*pydla_cpu_library_init_t)(cpu_library_init_args_t *args);

#endif /* PYDLA_CPU_LIBRARY_API_H */
