#include "pydla/shave.h"   /* MemRefData and the windows, generated from the contract specs */

typedef struct __attribute__((packed)) {
    MemRefData x, y;       /* pydla's part: one per input, then one per output */
    float a, b;            /* your parameter bytes */
} ScaleAddParams;

void scale_add(uint32_t argsAddr, uint32_t argsSize) {     /* y = x * a + b, FP32 */
    const ScaleAddParams *p = (const ScaleAddParams *)(uintptr_t)argsAddr;
    if (argsSize != sizeof *p || p->x.dataType != SHAVE_DATA_TYPE_FP32)
        __asm__ volatile("ebreak");                          /* stops the tile: a DlaError */
    const int32_t *dims = (const int32_t *)(uintptr_t)p->x.dimsAddr;
    uint32_t n = 1;
    for (uint32_t i = 0; i < p->x.numDims; i++) n *= (uint32_t)dims[i];
    const float *x = (const float *)(uintptr_t)p->x.dataAddr;
    float *y = (float *)(uintptr_t)p->y.dataAddr;
    for (uint32_t i = 0; i < n; i++) y[i] = x[i] * p->a + p->b;
}
