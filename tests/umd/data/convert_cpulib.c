/* The layout converters XRT's run-recipe documentation calls (convert_ifm, convert_ofm in
 * umd/convert.dll), for its runs made by the tests, in the C ABI of pydla/cpu_library_api.h.
 *   convert_ifm(src, dst, "nchw2nchw4c")   float32 NCHW with C = 4 -> NCHW4c (N, 1, H, W, 4)
 *   convert_ofm(src, dst, "nchw4c2nchw")   the inverse
 * C = 4 is the one channel count they handle (the recipe passes no shape): a group of four
 * channels is all there is, so NCHW4c interleaves the channels of each pixel.
 */
#include <stdio.h>
#include <string.h>

#include "pydla/cpu_library_api.h"

static int32_t error(char *message, uint32_t size, int32_t code, const char *text) {
    snprintf(message, size, "%s", text);
    return code;
}

static int same(const cpu_arg_t *arg, const char *text) {
    size_t n = strlen(text);
    return arg->size == n && memcmp((const char *)(uintptr_t)arg->data, text, n) == 0;
}

static int32_t convert(const cpu_arg_t *args, uint32_t n, char *message, uint32_t message_size) {
    if (n != 3 || args[0].kind != CPU_ARG_KIND_BUFFER || args[1].kind != CPU_ARG_KIND_BUFFER ||
        args[2].kind != CPU_ARG_KIND_STRING)
        return error(message, message_size, 4, "convert(src, dst, string layouts)");
    int to_4c = same(&args[2], "nchw2nchw4c");
    if (!to_4c && !same(&args[2], "nchw4c2nchw"))
        return error(message, message_size, 4, "convert: layouts nchw2nchw4c or nchw4c2nchw");
    if (args[0].size % 16 || args[1].size < args[0].size)
        return error(message, message_size, 10, "convert: src is not C=4 float32 or dst is smaller");
    const float *src = (const float *)(uintptr_t)args[0].data;
    float *dst = (float *)(uintptr_t)args[1].data;
    uint64_t pixels = args[0].size / 16;
    for (uint64_t p = 0; p < pixels; p++)
        for (uint64_t c = 0; c < 4; c++) {
            if (to_4c)
                dst[p * 4 + c] = src[c * pixels + p];
            else
                dst[c * pixels + p] = src[p * 4 + c];
        }
    return 0;
}

static int32_t lookup(const char *name, cpu_lookup_args_t *out) {
    if (strcmp(name, "convert_ifm") == 0 || strcmp(name, "convert_ofm") == 0) {
        out->num_args = 3;
        out->callable = (uint64_t)(uintptr_t)&convert;
        return 0;
    }
    return 1;
}

PYDLA_CPU_EXPORT void library_init(cpu_library_init_args_t *args) {
    args->lookup_fn = (uint64_t)(uintptr_t)&lookup;
}
