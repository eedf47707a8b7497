/* Helpers the shipped kernels share: walking a MemRefData (dims int32[], strides in bits int64[]).
 * Freestanding RV32IMF: no libc, no libm, no libgcc (so no 64-bit division: strides are shifted). */
#ifndef PYDLA_SHAVE_MEMREF_H
#define PYDLA_SHAVE_MEMREF_H

#include "pydla/shave.h"

/* A kernel's assert: ebreak stops the tile with error TRAP, naming the kernel and the PC. */
#define KERNEL_CHECK(cond) do { if (!(cond)) __asm__ volatile("ebreak"); } while (0)

/* A MemRefData turned into byte strides: what the loops need, read once from the packed struct. */
typedef struct {
    uint32_t ndims;
    uint8_t *data;
    int32_t dims[SHAVE_MAX_DIMS];
    int32_t step[SHAVE_MAX_DIMS]; /* bytes */
} view_t;

static inline uint32_t elem_bytes(uint32_t type) {
    switch (type) {
    case SHAVE_DATA_TYPE_FP32: case SHAVE_DATA_TYPE_I32: return 4;
    case SHAVE_DATA_TYPE_FP16: case SHAVE_DATA_TYPE_I16: return 2;
    case SHAVE_DATA_TYPE_I8: case SHAVE_DATA_TYPE_U8: return 1;
    default: return 0;
    }
}

/* The input's view; traps on a rank or stride the kernels do not handle. */
static inline void view_of(const MemRefData *m, view_t *v) {
    uint32_t n = m->numDims;
    KERNEL_CHECK(n >= 1 && n <= SHAVE_MAX_DIMS);
    const int32_t *dims = (const int32_t *)(uintptr_t)m->dimsAddr;
    const int64_t *strides = (const int64_t *)(uintptr_t)m->stridesAddr;
    v->ndims = n;
    v->data = (uint8_t *)(uintptr_t)m->dataAddr;
    for (uint32_t i = 0; i < n; i++) {
        int64_t bits = strides[i];
        KERNEL_CHECK(dims[i] >= 0 && (bits & 7) == 0);
        v->dims[i] = dims[i];
        v->step[i] = (int32_t)(bits >> 3);
    }
}

/* The output's view. A dynamic output (isStatic == 0) takes the input's dims, packed densely, and the
 * kernel writes them and their strides where the output's dimsAddr / stridesAddr point (WIN_F). */
static inline void output_view(const MemRefData *m, const view_t *in, view_t *out) {
    if (m->isStatic) {
        view_of(m, out);
        KERNEL_CHECK(out->ndims == in->ndims);
        for (uint32_t i = 0; i < in->ndims; i++) KERNEL_CHECK(out->dims[i] == in->dims[i]);
        return;
    }
    uint32_t n = in->ndims;
    KERNEL_CHECK(m->numDims == n);
    int32_t *dims = (int32_t *)(uintptr_t)m->dimsAddr;
    int64_t *strides = (int64_t *)(uintptr_t)m->stridesAddr;
    int32_t step = (int32_t)elem_bytes(m->dataType);
    KERNEL_CHECK(step != 0);
    out->ndims = n;
    out->data = (uint8_t *)(uintptr_t)m->dataAddr;
    for (uint32_t i = n; i-- > 0;) {
        out->dims[i] = in->dims[i];
        out->step[i] = step;
        dims[i] = in->dims[i];
        strides[i] = (int64_t)step * 8;
        step *= in->dims[i];
    }
}

/* Moves idx (all dims but `skip`) to the next position; 0 when done. Offsets follow in bytes. */
static inline int next_index(uint32_t n, uint32_t skip, const int32_t *dims, int32_t *idx,
                             const int32_t *step_a, int32_t *off_a, const int32_t *step_b, int32_t *off_b) {
    for (uint32_t i = n; i-- > 0;) {
        if (i == skip) continue;
        if (++idx[i] < dims[i]) {
            *off_a += step_a[i];
            *off_b += step_b[i];
            return 1;
        }
        *off_a -= step_a[i] * (dims[i] - 1);
        *off_b -= step_b[i] * (dims[i] - 1);
        idx[i] = 0;
    }
    return 0;
}

static inline int any_empty(const view_t *v) {
    for (uint32_t i = 0; i < v->ndims; i++) if (v->dims[i] == 0) return 1;
    return 0;
}

#endif
