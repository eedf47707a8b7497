/* reduce(argsAddr, argsSize): ReduceParams {input, output, op}: op (shave_reduce_e, ONNX's Reduce*
 * operators) over the middle dimension of a rank-3 input (A, R, B); the output holds A x B values, as
 * (A, 1, B) or (A, B), any strides. FP32 or FP16 data (each side), accumulated in float32 in order.
 * Accuracy against float64 references (tests/hw/shave): relative 1e-5 per accumulated element (the
 * sums' rounding), absolute 1e-6; MAX and MIN exact. An empty R gives the reduction's identity
 * (0, -inf for MAX and LOG_SUM_EXP, +inf for MIN, 1 for PROD; MEAN of nothing is NaN). */
#include "mathf.h"
#include "memref.h"

static float reduce_line(const uint8_t *src, int32_t len, int32_t step, uint32_t type, uint32_t op) {
    if (op == SHAVE_REDUCE_MAX || op == SHAVE_REDUCE_MIN || op == SHAVE_REDUCE_LOG_SUM_EXP) {
        float m = op == SHAVE_REDUCE_MIN ? from_bits(0x7f800000u) : from_bits(0xff800000u);
        for (int32_t i = 0; i < len; i++) {
            float x = load_f(src + i * step, type);
            if (x != x) return x; /* NaN propagates */
            if (op == SHAVE_REDUCE_MIN ? x < m : x > m) m = x;
        }
        if (op != SHAVE_REDUCE_LOG_SUM_EXP || len == 0 || m == from_bits(0xff800000u)) return m;
        if (m == from_bits(0x7f800000u)) return m;
        float sum = 0.0f;
        for (int32_t i = 0; i < len; i++) sum += exp_f(load_f(src + i * step, type) - m);
        return m + log_f(sum);
    }
    float acc = op == SHAVE_REDUCE_PROD ? 1.0f : 0.0f;
    for (int32_t i = 0; i < len; i++) {
        float x = load_f(src + i * step, type);
        switch (op) {
        case SHAVE_REDUCE_PROD: acc *= x; break;
        case SHAVE_REDUCE_L1: acc += x < 0.0f ? -x : x; break;
        case SHAVE_REDUCE_L2: case SHAVE_REDUCE_SUM_SQUARE: acc += x * x; break;
        default: acc += x; /* SUM, MEAN, LOG_SUM */
        }
    }
    if (op == SHAVE_REDUCE_MEAN) return acc / (float)len;
    if (op == SHAVE_REDUCE_L2) return sqrt_f(acc);
    if (op == SHAVE_REDUCE_LOG_SUM) return log_f(acc);
    return acc;
}

void reduce(uint32_t argsAddr, uint32_t argsSize) {
    KERNEL_CHECK(argsSize == sizeof(ReduceParams));
    const ReduceParams *p = (const ReduceParams *)(uintptr_t)argsAddr;
    KERNEL_CHECK(p->op <= SHAVE_REDUCE_LOG_SUM_EXP);
    view_t in, out;
    view_of(&p->input, &in);
    view_of(&p->output, &out);
    KERNEL_CHECK(in.ndims == 3 && (out.ndims == 3 || out.ndims == 2));
    uint32_t ti = p->input.dataType, to = p->output.dataType;
    KERNEL_CHECK((ti == SHAVE_DATA_TYPE_FP32 || ti == SHAVE_DATA_TYPE_FP16)
                 && (to == SHAVE_DATA_TYPE_FP32 || to == SHAVE_DATA_TYPE_FP16));
    int32_t a = in.dims[0], r = in.dims[1], b = in.dims[2];
    int32_t ob = out.ndims == 3 ? 2 : 1; /* the output's B dimension */
    KERNEL_CHECK(out.dims[0] == a && out.dims[ob] == b && (out.ndims == 2 || out.dims[1] == 1));
    for (int32_t i = 0; i < a; i++)
        for (int32_t j = 0; j < b; j++)
            store_f(out.data + i * out.step[0] + j * out.step[ob], to,
                    reduce_line(in.data + i * in.step[0] + j * in.step[2], r, in.step[1], ti, p->op));
}
