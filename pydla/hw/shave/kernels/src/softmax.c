/* softmax(argsAddr, argsSize): SoftmaxParams {input, output, axis}; FP32 data of any rank up to
 * SHAVE_MAX_DIMS and any strides, normalised along axis (negative: from the last). exp is a
 * degree-6 polynomial after range reduction (no libm): relative error below 1e-6 against numpy
 * (tests/hw/shave check rtol 1e-5). The output may be dynamic. */
#include "memref.h"

static float exp_neg(float x) {
    /* x <= 0 here (the maximum was subtracted): x = k ln2 + r, |r| <= ln2 / 2, exp(x) = 2^k e^r. */
    if (x < -87.0f) return 0.0f;
    float t = x * 1.44269504f;
    int32_t k = (int32_t)(t - 0.5f); /* rounds to nearest for t <= 0 */
    float r = x - (float)k * 0.693145752f - (float)k * 1.42860677e-06f;
    float p = 1.0f + r * (1.0f + r * (0.5f + r * (1.66666672e-01f + r * (4.16666679e-02f
              + r * (8.33333377e-03f + r * 1.38888892e-03f)))));
    union { float f; uint32_t u; } s;
    s.u = (uint32_t)(k + 127) << 23;
    return p * s.f;
}

void softmax(uint32_t argsAddr, uint32_t argsSize) {
    KERNEL_CHECK(argsSize == sizeof(SoftmaxParams));
    const SoftmaxParams *p = (const SoftmaxParams *)(uintptr_t)argsAddr;
    view_t in, out;
    view_of(&p->input, &in);
    output_view(&p->output, &in, &out);
    KERNEL_CHECK(p->input.dataType == SHAVE_DATA_TYPE_FP32 && p->output.dataType == SHAVE_DATA_TYPE_FP32);
    int32_t axis = p->axis, n = (int32_t)in.ndims;
    if (axis < 0) axis += n;
    KERNEL_CHECK(axis >= 0 && axis < n);
    if (any_empty(&in)) return;
    int32_t idx[SHAVE_MAX_DIMS] = {0};
    int32_t off_in = 0, off_out = 0, len = in.dims[axis], si = in.step[axis], so = out.step[axis];
    do {
        const uint8_t *s = in.data + off_in;
        uint8_t *d = out.data + off_out;
        float m = *(const float *)s;
        for (int32_t i = 1; i < len; i++) {
            float x = *(const float *)(s + i * si);
            if (x > m) m = x;
        }
        float sum = 0.0f;
        for (int32_t i = 0; i < len; i++) {
            float e = exp_neg(*(const float *)(s + i * si) - m);
            *(float *)(d + i * so) = e;
            sum += e;
        }
        float inv = 1.0f / sum;
        for (int32_t i = 0; i < len; i++) *(float *)(d + i * so) *= inv;
    } while (next_index((uint32_t)n, (uint32_t)axis, in.dims, idx, in.step, &off_in, out.step, &off_out));
}
