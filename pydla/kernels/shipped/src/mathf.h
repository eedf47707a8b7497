/* Float functions for the shipped kernels (no libm in a freestanding RV32IMF build). The emulator
 * runs each floating-point instruction through a helper and integer instructions inline, so these
 * use few floating-point operations: exp from a table of 2^(j/256) and a quadratic. */
#ifndef PYDLA_SHAVE_MATHF_H
#define PYDLA_SHAVE_MATHF_H

#include <stdint.h>

#include "pydla/shave.h"

/* The bits of 2^(j/256), j = 0..255, rounded to float32. */
static const uint32_t EXP2_256[256] = {
    0x3f800000u, 0x3f8058d8u, 0x3f80b1edu, 0x3f810b41u, 0x3f8164d2u, 0x3f81bea1u,
    0x3f8218afu, 0x3f8272fcu, 0x3f82cd87u, 0x3f832850u, 0x3f838359u, 0x3f83dea1u,
    0x3f843a29u, 0x3f8495f0u, 0x3f84f1f6u, 0x3f854e3du, 0x3f85aac3u, 0x3f86078au,
    0x3f866491u, 0x3f86c1d9u, 0x3f871f62u, 0x3f877d2bu, 0x3f87db35u, 0x3f883981u,
    0x3f88980fu, 0x3f88f6ddu, 0x3f8955eeu, 0x3f89b541u, 0x3f8a14d5u, 0x3f8a74adu,
    0x3f8ad4c6u, 0x3f8b3523u, 0x3f8b95c2u, 0x3f8bf6a4u, 0x3f8c57cau, 0x3f8cb933u,
    0x3f8d1adfu, 0x3f8d7cd0u, 0x3f8ddf04u, 0x3f8e417du, 0x3f8ea43au, 0x3f8f073bu,
    0x3f8f6a81u, 0x3f8fce0cu, 0x3f9031dcu, 0x3f9095f2u, 0x3f90fa4du, 0x3f915eedu,
    0x3f91c3d3u, 0x3f922900u, 0x3f928e72u, 0x3f92f42cu, 0x3f935a2bu, 0x3f93c072u,
    0x3f9426ffu, 0x3f948dd4u, 0x3f94f4f0u, 0x3f955c53u, 0x3f95c3ffu, 0x3f962bf2u,
    0x3f96942du, 0x3f96fcb1u, 0x3f97657du, 0x3f97ce92u, 0x3f9837f0u, 0x3f98a197u,
    0x3f990b88u, 0x3f9975c2u, 0x3f99e046u, 0x3f9a4b13u, 0x3f9ab62bu, 0x3f9b218du,
    0x3f9b8d3au, 0x3f9bf931u, 0x3f9c6573u, 0x3f9cd201u, 0x3f9d3edau, 0x3f9dabfeu,
    0x3f9e196eu, 0x3f9e872au, 0x3f9ef532u, 0x3f9f6387u, 0x3f9fd228u, 0x3fa04116u,
    0x3fa0b051u, 0x3fa11fd9u, 0x3fa18fafu, 0x3fa1ffd2u, 0x3fa27043u, 0x3fa2e102u,
    0x3fa3520fu, 0x3fa3c36bu, 0x3fa43516u, 0x3fa4a70fu, 0x3fa51958u, 0x3fa58befu,
    0x3fa5fed7u, 0x3fa6720eu, 0x3fa6e595u, 0x3fa7596cu, 0x3fa7cd94u, 0x3fa8420cu,
    0x3fa8b6d5u, 0x3fa92befu, 0x3fa9a15bu, 0x3faa1718u, 0x3faa8d26u, 0x3fab0387u,
    0x3fab7a3au, 0x3fabf13fu, 0x3fac6897u, 0x3face041u, 0x3fad583fu, 0x3fadd090u,
    0x3fae4934u, 0x3faec22du, 0x3faf3b79u, 0x3fafb519u, 0x3fb02f0eu, 0x3fb0a957u,
    0x3fb123f6u, 0x3fb19ee9u, 0x3fb21a32u, 0x3fb295d0u, 0x3fb311c4u, 0x3fb38e0eu,
    0x3fb40aafu, 0x3fb487a6u, 0x3fb504f3u, 0x3fb58298u, 0x3fb60094u, 0x3fb67ee7u,
    0x3fb6fd92u, 0x3fb77c95u, 0x3fb7fbf0u, 0x3fb87ba3u, 0x3fb8fbafu, 0x3fb97c14u,
    0x3fb9fcd2u, 0x3fba7deau, 0x3fbaff5bu, 0x3fbb8126u, 0x3fbc034au, 0x3fbc85cau,
    0x3fbd08a4u, 0x3fbd8bd8u, 0x3fbe0f68u, 0x3fbe9353u, 0x3fbf179au, 0x3fbf9c3cu,
    0x3fc0213bu, 0x3fc0a695u, 0x3fc12c4du, 0x3fc1b261u, 0x3fc238d2u, 0x3fc2bfa1u,
    0x3fc346cdu, 0x3fc3ce57u, 0x3fc4563fu, 0x3fc4de85u, 0x3fc5672au, 0x3fc5f02eu,
    0x3fc67991u, 0x3fc70353u, 0x3fc78d75u, 0x3fc817f7u, 0x3fc8a2d8u, 0x3fc92e1bu,
    0x3fc9b9beu, 0x3fca45c1u, 0x3fcad226u, 0x3fcb5eedu, 0x3fcbec15u, 0x3fcc799fu,
    0x3fcd078cu, 0x3fcd95dau, 0x3fce248cu, 0x3fceb3a1u, 0x3fcf4319u, 0x3fcfd2f4u,
    0x3fd06334u, 0x3fd0f3d7u, 0x3fd184dfu, 0x3fd2164cu, 0x3fd2a81eu, 0x3fd33a54u,
    0x3fd3ccf1u, 0x3fd45ff3u, 0x3fd4f35bu, 0x3fd58729u, 0x3fd61b5eu, 0x3fd6affau,
    0x3fd744fdu, 0x3fd7da67u, 0x3fd87039u, 0x3fd90673u, 0x3fd99d16u, 0x3fda3421u,
    0x3fdacb94u, 0x3fdb6371u, 0x3fdbfbb8u, 0x3fdc9468u, 0x3fdd2d82u, 0x3fddc706u,
    0x3fde60f5u, 0x3fdefb4eu, 0x3fdf9613u, 0x3fe03143u, 0x3fe0ccdfu, 0x3fe168e7u,
    0x3fe2055bu, 0x3fe2a23cu, 0x3fe33f89u, 0x3fe3dd44u, 0x3fe47b6du, 0x3fe51a03u,
    0x3fe5b907u, 0x3fe65879u, 0x3fe6f85bu, 0x3fe798abu, 0x3fe8396au, 0x3fe8da99u,
    0x3fe97c38u, 0x3fea1e47u, 0x3feac0c7u, 0x3feb63b7u, 0x3fec0719u, 0x3fecaaecu,
    0x3fed4f30u, 0x3fedf3e7u, 0x3fee9910u, 0x3fef3eabu, 0x3fefe4bau, 0x3ff08b3bu,
    0x3ff13231u, 0x3ff1d99au, 0x3ff28177u, 0x3ff329c9u, 0x3ff3d290u, 0x3ff47bccu,
    0x3ff5257du, 0x3ff5cfa4u, 0x3ff67a41u, 0x3ff72555u, 0x3ff7d0dfu, 0x3ff87ce1u,
    0x3ff9295au, 0x3ff9d64au, 0x3ffa83b3u, 0x3ffb3194u, 0x3ffbdfedu, 0x3ffc8ec0u,
    0x3ffd3e0cu, 0x3ffdedd2u, 0x3ffe9e11u, 0x3fff4ecbu,
};

#define ROUNDER 12582912.0f /* 1.5 * 2^23: adding it rounds to an integer, found in the low bits */
#define ROUNDER_BITS 0x4b400000

/* A float's bits as an integer that orders like the value (for non-NaN values): comparisons in the
 * integer unit. */
static inline int32_t order_key(float x) {
    union { float f; int32_t i; } b;
    b.f = x;
    return b.i >= 0 ? b.i : (int32_t)(0x80000000u - (uint32_t)b.i);
}

static inline float from_bits(uint32_t u) {
    union { float f; uint32_t u; } b;
    b.u = u;
    return b.f;
}

/* The F extension's square root (GCC would call libm's sqrtf to set errno for negative inputs). */
static inline float sqrt_f(float x) {
    float r;
    __asm__("fsqrt.s %0, %1" : "=f"(r) : "f"(x));
    return r;
}

/* exp(x) for -87.3 <= x <= 88.7 (the caller handles the ends): 2^(n/256) e^r with
 * n = round(x * 256 / ln2), |r| <= ln2 / 512; relative error about 1e-7. */
static inline float exp_core(float x) {
    union { float f; int32_t i; } t;
    t.f = x * 369.3299255371094f + ROUNDER;
    int32_t n = t.i - ROUNDER_BITS;
    float nf = t.f - ROUNDER;
    float r = x - nf * 0.0027074813842773438f; /* ln2 / 256 in two parts (Cody-Waite) */
    r = r - nf * 1.2478978e-07f;
    float p = 1.0f + r * (1.0f + r * 0.5f); /* |r| <= ln2 / 512: error < 3e-10 */
    return p * from_bits(EXP2_256[n & 255] + ((uint32_t)(n >> 8) << 23));
}

/* exp(x) for every x: 0 below -87.3 (results under 2^-126 are flushed to 0), +inf above 88.7. */
static inline float exp_f(float x) {
    if (x < -87.3f) return 0.0f;
    if (x > 88.7f) return from_bits(0x7f800000u);
    return exp_core(x);
}

/* log(x): -inf at 0, NaN below 0 and for NaN, +inf at +inf. x = 2^e m with m in [sqrt(1/2), sqrt(2));
 * log(m) = 2 atanh(s), s = (m - 1) / (m + 1), |s| <= 0.172, by its odd series to s^11 (the next term
 * is below 4e-10); e ln2 in two parts. Relative error about 1e-7 (absolute near x = 1). */
static inline float log_f(float x) {
    union { float f; uint32_t u; } b;
    b.f = x;
    if (b.u == 0u || b.u == 0x80000000u) return from_bits(0xff800000u);
    if (b.u >> 31) return from_bits(0x7fc00000u);                /* below 0 */
    if ((b.u & 0x7f800000u) == 0x7f800000u) return x;           /* +inf, NaN */
    int32_t e = 0;
    if ((b.u & 0x7f800000u) == 0u) { /* subnormal: scale by 2^24 */
        b.f = x * 16777216.0f;
        e = -24;
    }
    e += (int32_t)((b.u >> 23) & 0xffu) - 127;
    float m = from_bits((b.u & 0x7fffffu) | 0x3f800000u);
    if (m > 1.41421356f) {
        m *= 0.5f;
        e += 1;
    }
    float s = (m - 1.0f) / (m + 1.0f), z = s * s;
    float lm = 2.0f * s * (1.0f + z * (0.333333333f + z * (0.2f + z * (0.142857143f + z * (0.111111111f
               + z * 0.0909090909f)))));
    float ef = (float)e;
    return ef * 0.693145752f + (lm + ef * 1.42860677e-06f); /* ln2 = 0.693145752 + 1.42860677e-6 */
}

/* log(1 + x) for x >= 0: 2 atanh(x / (2 + x)) while x < 0.5 (no cancellation for small x), else log_f. */
static inline float log1p_f(float x) {
    if (x >= 0.5f) return log_f(1.0f + x);
    float s = x / (2.0f + x), z = s * s; /* s < 0.2: the series to s^11, next term < 2e-9 */
    return 2.0f * s * (1.0f + z * (0.333333333f + z * (0.2f + z * (0.142857143f + z * (0.111111111f
           + z * 0.0909090909f)))));
}

/* An IEEE-754 binary16 (its bits) as a float: exact. */
static inline float h_to_f(uint32_t h) {
    uint32_t sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) {
        float f = (float)m * (1.0f / 16777216.0f); /* zero or subnormal: m * 2^-24, exact */
        union { float f; uint32_t u; } v;
        v.f = f;
        return from_bits(v.u | sign);
    }
    if (e == 31) return from_bits(sign | 0x7f800000u | (m << 13));
    return from_bits(sign | ((e + 112u) << 23) | (m << 13));
}

/* A float as binary16 bits, rounded to nearest even as numpy's astype(float16): integer operations
 * only. NaN stays NaN (quiet), overflow gives infinity, underflow a subnormal or zero. */
static inline uint32_t f_to_h(float f) {
    union { float f; uint32_t u; } b;
    b.f = f;
    uint32_t x = b.u, sign = (x >> 16) & 0x8000u, e = (x >> 23) & 0xffu, m = x & 0x7fffffu;
    if (e == 0xffu) return sign | 0x7c00u | (m ? 0x200u | (m >> 13) : 0u);
    int32_t he = (int32_t)e - 112; /* the binary16 exponent field */
    if (he >= 31) return sign | 0x7c00u;
    if (he <= 0) {
        if (he < -10) return sign;
        m |= 0x800000u;
        uint32_t shift = (uint32_t)(14 - he), half = 1u << (shift - 1);
        uint32_t hm = m >> shift, rem = m & ((1u << shift) - 1u);
        if (rem > half || (rem == half && (hm & 1u))) hm++;
        return sign | hm;
    }
    uint32_t h = sign | ((uint32_t)he << 10) | (m >> 13), rem = m & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++; /* a carry into the exponent is right */
    return h;
}

/* An element of an FP32 or FP16 buffer, as a float; and back. */
static inline float load_f(const uint8_t *p, uint32_t type) {
    return type == SHAVE_DATA_TYPE_FP16 ? h_to_f(*(const uint16_t *)p) : *(const float *)p;
}

static inline void store_f(uint8_t *p, uint32_t type, float v) {
    if (type == SHAVE_DATA_TYPE_FP16) *(uint16_t *)p = (uint16_t)f_to_h(v);
    else *(float *)p = v;
}

/* The largest of len elements step bytes apart (compared as order keys: integer operations). */
static inline float line_max(const uint8_t *src, int32_t len, int32_t step, uint32_t type) {
    float m = load_f(src, type);
    int32_t best = order_key(m);
    for (int32_t i = 1; i < len; i++) {
        float x = load_f(src + i * step, type);
        int32_t k = order_key(x);
        if (k > best) {
            best = k;
            m = x;
        }
    }
    return m;
}

#endif
