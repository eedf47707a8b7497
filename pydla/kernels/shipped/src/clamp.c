/* clamp(argsAddr, argsSize): the VPUX software layers' example kernel. ClampParams {input, output,
 * minVal, maxVal}; data FP16 (the seed's memref<*xf16>) or FP32, input and output of one type, any
 * rank up to SHAVE_MAX_DIMS and any strides; bounds are f16. A NaN input stays NaN. The output may be
 * dynamic (its dims and strides written by the kernel). Bit-exact with numpy.clip. */
#include "mathf.h"
#include "memref.h"

/* An f16 as an integer that orders like the value (for non-NaN values; -0 and +0 compare equal). */
static inline int32_t h_key(uint32_t h) { return (h & 0x8000u) ? -(int32_t)(h & 0x7fffu) : (int32_t)h; }
static inline int h_nan(uint32_t h) { return (h & 0x7fffu) > 0x7c00u; }

void clamp(uint32_t argsAddr, uint32_t argsSize) {
    KERNEL_CHECK(argsSize == sizeof(ClampParams));
    const ClampParams *p = (const ClampParams *)(uintptr_t)argsAddr;
    view_t in, out;
    view_of(&p->input, &in);
    output_view(&p->output, &in, &out);
    uint32_t type = p->input.dataType;
    KERNEL_CHECK(type == p->output.dataType);
    KERNEL_CHECK(type == SHAVE_DATA_TYPE_FP16 || type == SHAVE_DATA_TYPE_FP32);
    if (any_empty(&in)) return;
    uint32_t lo_bits = p->minVal, hi_bits = p->maxVal;
    uint32_t n = in.ndims, last = n - 1;
    int32_t idx[SHAVE_MAX_DIMS] = {0};
    int32_t off_in = 0, off_out = 0, len = in.dims[last], si = in.step[last], so = out.step[last];
    if (type == SHAVE_DATA_TYPE_FP16) {
        int32_t lo = h_key(lo_bits), hi = h_key(hi_bits);
        do {
            const uint8_t *s = in.data + off_in;
            uint8_t *d = out.data + off_out;
            for (int32_t i = 0; i < len; i++, s += si, d += so) {
                uint32_t h = *(const uint16_t *)s;
                int32_t k = h_key(h);
                if (!h_nan(h)) h = k < lo ? lo_bits : (k > hi ? hi_bits : h);
                *(uint16_t *)d = (uint16_t)h;
            }
        } while (next_index(n, last, in.dims, idx, in.step, &off_in, out.step, &off_out));
    } else {
        float lo = h_to_f(lo_bits), hi = h_to_f(hi_bits);
        do {
            const uint8_t *s = in.data + off_in;
            uint8_t *d = out.data + off_out;
            for (int32_t i = 0; i < len; i++, s += si, d += so) {
                float x = *(const float *)s;
                *(float *)d = x < lo ? lo : (x > hi ? hi : x);
            }
        } while (next_index(n, last, in.dims, idx, in.step, &off_in, out.step, &off_out));
    }
}
