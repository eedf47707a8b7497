/* activation(argsAddr, argsSize): ActivationParams {input, output, op}: op (shave_activation_e)
 * applied to each element; FP32 or FP16 data (input and output each; computed in float32), any rank
 * up to SHAVE_MAX_DIMS and any strides; the output may be dynamic. Accuracy against float64
 * references (tests/hw/shave): EXP and SIGMOID relative 1e-5 (results under 2^-126 flush to 0); TANH,
 * ERF, GELU, LOG, SOFTPLUS and MISH absolute 1e-6 and relative 1e-5; SQRT is the F extension's,
 * correctly rounded. */
#include "mathf.h"
#include "memref.h"

static inline float sigmoid_f(float x) { return 1.0f / (1.0f + exp_f(-x)); }

static inline float tanh_f(float x) {
    float a = x < 0.0f ? -x : x;
    if (a < 0.3f) { /* the odd series: its next term is below 2e-8 relative */
        float z = x * x;
        return x * (1.0f + z * (-0.333333343f + z * (0.133333340f + z * (-0.0539682540f
                    + z * 0.0218694885f))));
    }
    if (a > 9.0f) return x < 0.0f ? -1.0f : 1.0f;
    float t = 1.0f - 2.0f / (exp_core(2.0f * a) + 1.0f);
    return x < 0.0f ? -t : t;
}

static inline float erf_f(float x) {
    float a = x < 0.0f ? -x : x;
    if (a < 0.5f) { /* the series of 2/sqrt(pi) (x - x^3/3 + x^5/10 - ...): next term < 3e-8 */
        float z = x * x;
        return x * (1.12837917f + z * (-0.376126389f + z * (0.112837917f + z * (-0.0268661706f
                    + z * (0.00522397762f + z * -0.000854832702f)))));
    }
    if (a > 4.0f) return x < 0.0f ? -1.0f : 1.0f;
    /* Abramowitz and Stegun 7.1.26: absolute error below 1.5e-7. */
    float t = 1.0f / (1.0f + 0.3275911f * a);
    float poly = t * (0.254829592f + t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f
                 + t * 1.061405429f))));
    float e = 1.0f - poly * exp_core(-a * a);
    return x < 0.0f ? -e : e;
}

/* log(1 + e^x): x above 20 (e^-20 below float's precision of x), else log1p of e^x. */
static inline float softplus_f(float x) {
    if (x > 20.0f) return x;
    return log1p_f(exp_f(x));
}

static inline float apply(uint32_t op, float x) {
    switch (op) {
    case SHAVE_ACTIVATION_EXP: return exp_f(x);
    case SHAVE_ACTIVATION_SIGMOID: return sigmoid_f(x);
    case SHAVE_ACTIVATION_TANH: return tanh_f(x);
    case SHAVE_ACTIVATION_ERF: return erf_f(x);
    case SHAVE_ACTIVATION_SQRT: return sqrt_f(x);
    case SHAVE_ACTIVATION_LOG: return log_f(x);
    case SHAVE_ACTIVATION_SOFTPLUS: return softplus_f(x);
    case SHAVE_ACTIVATION_MISH: return x * tanh_f(softplus_f(x));
    default: return 0.5f * x * (1.0f + erf_f(x * 0.707106781f)); /* GELU */
    }
}

void activation(uint32_t argsAddr, uint32_t argsSize) {
    KERNEL_CHECK(argsSize == sizeof(ActivationParams));
    const ActivationParams *p = (const ActivationParams *)(uintptr_t)argsAddr;
    uint32_t op = p->op;
    KERNEL_CHECK(op <= SHAVE_ACTIVATION_MISH);
    view_t in, out;
    view_of(&p->input, &in);
    output_view(&p->output, &in, &out);
    uint32_t ti = p->input.dataType, to = p->output.dataType;
    KERNEL_CHECK((ti == SHAVE_DATA_TYPE_FP32 || ti == SHAVE_DATA_TYPE_FP16)
                 && (to == SHAVE_DATA_TYPE_FP32 || to == SHAVE_DATA_TYPE_FP16));
    if (any_empty(&in)) return;
    uint32_t n = in.ndims, last = n - 1;
    int32_t idx[SHAVE_MAX_DIMS] = {0};
    int32_t off_in = 0, off_out = 0, len = in.dims[last], si = in.step[last], so = out.step[last];
    do {
        const uint8_t *s = in.data + off_in;
        uint8_t *d = out.data + off_out;
        for (int32_t i = 0; i < len; i++, s += si, d += so) store_f(d, to, apply(op, load_f(s, ti)));
    } while (next_index(n, last, in.dims, idx, in.step, &off_in, out.step, &off_out));
}
