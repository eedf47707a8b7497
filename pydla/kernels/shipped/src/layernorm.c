/* layernorm(argsAddr, argsSize): LayerNormParams {input, output, scale, bias, axis, epsilon}: ONNX
 * LayerNormalization, y = (x - mean) / sqrt(var + epsilon) * scale + bias over the dimensions from
 * axis to the last (dense in input and output; the outer dimensions take any strides). scale and bias
 * are dense FP32 vectors of that many values, or absent (numDims 0). FP32 data; two passes (the mean,
 * then the variance of the centred values) in float32: relative 1e-5 against a float64 reference,
 * absolute 1e-5 for values near 0 (tests/hw/shave). The output may be dynamic. */
#include "mathf.h"
#include "memref.h"

static const float *vector_of(const MemRefData *m, int32_t count) {
    if (m->numDims == 0) return 0;
    view_t v;
    view_of(m, &v);
    int32_t total = 1;
    for (uint32_t i = 0; i < v.ndims; i++) total *= v.dims[i];
    KERNEL_CHECK(total == count && m->dataType == SHAVE_DATA_TYPE_FP32);
    KERNEL_CHECK(v.step[v.ndims - 1] == 4);
    return (const float *)v.data;
}

/* Whether dims [axis, n) are dense (4-byte floats, innermost first) in v; their element count. */
static int32_t dense_group(const view_t *v, uint32_t axis) {
    int32_t expect = 4, count = 1;
    for (uint32_t i = v->ndims; i-- > axis;) {
        if (v->dims[i] > 1) KERNEL_CHECK(v->step[i] == expect);
        expect *= v->dims[i];
        count *= v->dims[i];
    }
    return count;
}

void layernorm(uint32_t argsAddr, uint32_t argsSize) {
    KERNEL_CHECK(argsSize == sizeof(LayerNormParams));
    const LayerNormParams *p = (const LayerNormParams *)(uintptr_t)argsAddr;
    view_t in, out;
    view_of(&p->input, &in);
    output_view(&p->output, &in, &out);
    KERNEL_CHECK(p->input.dataType == SHAVE_DATA_TYPE_FP32 && p->output.dataType == SHAVE_DATA_TYPE_FP32);
    int32_t axis = p->axis, n = (int32_t)in.ndims;
    if (axis < 0) axis += n;
    KERNEL_CHECK(axis >= 0 && axis < n);
    if (any_empty(&in)) return;
    int32_t count = dense_group(&in, (uint32_t)axis);
    KERNEL_CHECK(dense_group(&out, (uint32_t)axis) == count);
    const float *scale = vector_of(&p->scale, count), *bias = vector_of(&p->bias, count);
    float eps = p->epsilon, inv_count = 1.0f / (float)count;
    /* The outer dimensions, walked as next_index walks all but one: the group is the innermost. */
    uint32_t outer = (uint32_t)axis;
    int32_t idx[SHAVE_MAX_DIMS] = {0};
    int32_t off_in = 0, off_out = 0;
    do {
        const float *x = (const float *)(in.data + off_in);
        float *y = (float *)(out.data + off_out);
        float sum = 0.0f;
        for (int32_t i = 0; i < count; i++) sum += x[i];
        float mean = sum * inv_count, var = 0.0f;
        for (int32_t i = 0; i < count; i++) {
            float d = x[i] - mean;
            var += d * d;
        }
        float rstd = 1.0f / sqrt_f(var * inv_count + eps);
        for (int32_t i = 0; i < count; i++) {
            float v = (x[i] - mean) * rstd;
            if (scale) v *= scale[i];
            if (bias) v += bias[i];
            y[i] = v;
        }
    } while (next_index(outer, outer, in.dims, idx, in.step, &off_in, out.step, &off_out));
}
