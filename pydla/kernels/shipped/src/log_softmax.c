/* log_softmax(argsAddr, argsSize): SoftmaxParams {input, output, axis}: log(softmax(x)) along axis,
 * computed as (x - max) - log(sum exp(x - max)), so that no element underflows to -inf. FP32 or FP16
 * data (each side; computed in float32), any rank up to SHAVE_MAX_DIMS and any strides; the output
 * may be dynamic. Accuracy: absolute 1e-5 plus relative 1e-5 against a float64 reference
 * (tests/hw/shave). */
#include "mathf.h"
#include "memref.h"

/* One line along the axis: the maximum, the log of the sum of the shifted exponentials, the result. */
static void log_softmax_line(const uint8_t *src, uint8_t *dst, int32_t len, int32_t si, int32_t so,
                             uint32_t ti, uint32_t to) {
    float m = line_max(src, len, si, ti);
    float sum = 0.0f;
    for (int32_t i = 0; i < len; i++) sum += exp_f(load_f(src + i * si, ti) - m);
    float lse = log_f(sum);
    for (int32_t i = 0; i < len; i++) store_f(dst + i * so, to, (load_f(src + i * si, ti) - m) - lse);
}

void log_softmax(uint32_t argsAddr, uint32_t argsSize) {
    KERNEL_CHECK(argsSize == sizeof(SoftmaxParams));
    const SoftmaxParams *p = (const SoftmaxParams *)(uintptr_t)argsAddr;
    view_t in, out;
    view_of(&p->input, &in);
    output_view(&p->output, &in, &out);
    uint32_t ti = p->input.dataType, to = p->output.dataType;
    KERNEL_CHECK((ti == SHAVE_DATA_TYPE_FP32 || ti == SHAVE_DATA_TYPE_FP16)
                 && (to == SHAVE_DATA_TYPE_FP32 || to == SHAVE_DATA_TYPE_FP16));
    int32_t axis = p->axis, n = (int32_t)in.ndims;
    if (axis < 0) axis += n;
    KERNEL_CHECK(axis >= 0 && axis < n);
    if (any_empty(&in)) return;
    int32_t idx[SHAVE_MAX_DIMS] = {0};
    int32_t off_in = 0, off_out = 0;
    do {
        log_softmax_line(in.data + off_in, out.data + off_out, in.dims[axis], in.step[axis], out.step[axis],
                         ti, to);
    } while (next_index((uint32_t)n, (uint32_t)axis, in.dims, idx, in.step, &off_in, out.step, &off_out));
}
