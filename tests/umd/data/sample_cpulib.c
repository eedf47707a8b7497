/* A sample CPU library for the runner's tests, in the C ABI of pydla/cpu_library_api.h.
 *   affine(src, dst, scale: float, offset: int)  dst[i] = src[i] * scale + offset   (float32)
 *   tag(dst, text: string)                       copies text into dst, NUL-padded
 *   fail(code: int)                              returns `code` with a message
 */
#include <stdio.h>
#include <string.h>

#include "pydla/cpu_library_api.h"

static int32_t error(char *message, uint32_t size, int32_t code, const char *text) {
    snprintf(message, size, "%s", text);
    return code;
}

static int32_t affine(const cpu_arg_t *args, uint32_t n, char *message, uint32_t message_size) {
    if (n != 4 || args[0].kind != CPU_ARG_KIND_BUFFER || args[1].kind != CPU_ARG_KIND_BUFFER ||
        args[2].kind != CPU_ARG_KIND_FLOAT || args[3].kind != CPU_ARG_KIND_INT)
        return error(message, message_size, 4, "affine(src, dst, float scale, int offset)");
    if (args[1].size < args[0].size)
        return error(message, message_size, 10, "affine: dst is smaller than src");
    const float *src = (const float *)(uintptr_t)args[0].data;
    float *dst = (float *)(uintptr_t)args[1].data;
    for (uint64_t i = 0; i < args[0].size / sizeof(float); i++)
        dst[i] = src[i] * (float)args[2].float_value + (float)args[3].int_value;
    return 0;
}

static int32_t tag(const cpu_arg_t *args, uint32_t n, char *message, uint32_t message_size) {
    if (n != 2 || args[0].kind != CPU_ARG_KIND_BUFFER || args[1].kind != CPU_ARG_KIND_STRING)
        return error(message, message_size, 4, "tag(dst, string text)");
    char *dst = (char *)(uintptr_t)args[0].data;
    memset(dst, 0, args[0].size);
    memcpy(dst, (const char *)(uintptr_t)args[1].data,
           args[1].size < args[0].size ? args[1].size : args[0].size);
    return 0;
}

static int32_t fail(const cpu_arg_t *args, uint32_t n, char *message, uint32_t message_size) {
    (void)n;
    return error(message, message_size, (int32_t)args[0].int_value, "asked to fail");
}

static int32_t lookup(const char *name, cpu_lookup_args_t *out) {
    if (strcmp(name, "affine") == 0) { out->num_args = 4; out->callable = (uint64_t)(uintptr_t)&affine; return 0; }
    if (strcmp(name, "tag") == 0) { out->num_args = 2; out->callable = (uint64_t)(uintptr_t)&tag; return 0; }
    if (strcmp(name, "fail") == 0) { out->num_args = 1; out->callable = (uint64_t)(uintptr_t)&fail; return 0; }
    return 1;
}

PYDLA_CPU_EXPORT void library_init(cpu_library_init_args_t *args) {
    args->lookup_fn = (uint64_t)(uintptr_t)&lookup;
}
