/* softmax(argsAddr, argsSize): SoftmaxParams {input, output, axis}; FP32 data of any rank up to
 * SHAVE_MAX_DIMS and any strides (FP16 input or output too, computed in float32), normalised along axis (negative: from the last). exp without libm:
 * exp(x) = 2^(n/256) e^r with n = round(x * 256 / ln2), 2^(n/256) from a 256-entry table and the
 * exponent bits, e^r (|r| <= ln2/512) from a quadratic: relative error about 1e-7 per element; tests
 * check rtol 1e-5 against numpy. Inputs below max - 87 give 0; NaN inputs give unspecified values.
 * The output may be dynamic. */
#include "mathf.h"
#include "memref.h"

/* exp(x - m) for x - m <= 0 (m is the maximum); 0 when x is below the threshold (m - 87) whose
 * order key is `low` (an integer comparison: no floating-point helper). */
static inline float exp_shifted(float x, float m, int32_t low) {
    if (order_key(x) < low) return 0.0f;
    return exp_core(x - m);
}

/* One line along the axis, FP32: dense lines (the common case) walk pointers; others use strides. */
static void softmax_line(const uint8_t *src, uint8_t *dst, int32_t len, int32_t si, int32_t so) {
    int32_t best = order_key(*(const float *)src);
    float m = *(const float *)src;
    for (int32_t i = 1; i < len; i++) {
        float x = *(const float *)(src + i * si);
        int32_t k = order_key(x);
        if (k > best) {
            best = k;
            m = x;
        }
    }
    int32_t low = order_key(m - 87.0f);
    float sum = 0.0f;
    if (si == 4 && so == 4) {
        const float *a = (const float *)src;
        float *o = (float *)dst;
        for (int32_t i = 0; i < len; i++) {
            float e = exp_shifted(a[i], m, low);
            o[i] = e;
            sum += e;
        }
        float inv = 1.0f / sum;
        for (int32_t i = 0; i < len; i++) o[i] *= inv;
        return;
    }
    for (int32_t i = 0; i < len; i++) {
        float e = exp_shifted(*(const float *)(src + i * si), m, low);
        *(float *)(dst + i * so) = e;
        sum += e;
    }
    float inv = 1.0f / sum;
    for (int32_t i = 0; i < len; i++) *(float *)(dst + i * so) *= inv;
}

/* One line with an FP16 input or output: the exponentials are not stored between the passes (an
 * FP16 output would round them twice): the last pass computes them again. */
static void softmax_line_any(const uint8_t *src, uint8_t *dst, int32_t len, int32_t si, int32_t so,
                             uint32_t ti, uint32_t to) {
    float m = line_max(src, len, si, ti);
    int32_t low = order_key(m - 87.0f);
    float sum = 0.0f;
    for (int32_t i = 0; i < len; i++) sum += exp_shifted(load_f(src + i * si, ti), m, low);
    float inv = 1.0f / sum;
    for (int32_t i = 0; i < len; i++)
        store_f(dst + i * so, to, exp_shifted(load_f(src + i * si, ti), m, low) * inv);
}

void softmax(uint32_t argsAddr, uint32_t argsSize) {
    KERNEL_CHECK(argsSize == sizeof(SoftmaxParams));
    const SoftmaxParams *p = (const SoftmaxParams *)(uintptr_t)argsAddr;
    view_t in, out;
    view_of(&p->input, &in);
    output_view(&p->output, &in, &out);
    uint32_t ti = p->input.dataType, to = p->output.dataType;
    KERNEL_CHECK((ti == SHAVE_DATA_TYPE_FP32 || ti == SHAVE_DATA_TYPE_FP16)
                 && (to == SHAVE_DATA_TYPE_FP32 || to == SHAVE_DATA_TYPE_FP16));
    int fp32 = ti == SHAVE_DATA_TYPE_FP32 && to == SHAVE_DATA_TYPE_FP32;
    int32_t axis = p->axis, n = (int32_t)in.ndims;
    if (axis < 0) axis += n;
    KERNEL_CHECK(axis >= 0 && axis < n);
    if (any_empty(&in)) return;
    int32_t idx[SHAVE_MAX_DIMS] = {0};
    int32_t off_in = 0, off_out = 0;
    do {
        if (fp32)
            softmax_line(in.data + off_in, out.data + off_out, in.dims[axis], in.step[axis], out.step[axis]);
        else
            softmax_line_any(in.data + off_in, out.data + off_out, in.dims[axis], in.step[axis],
                             out.step[axis], ti, to);
    } while (next_index((uint32_t)n, (uint32_t)axis, in.dims, idx, in.step, &off_in, out.step, &off_out));
}
