/* The runtime kernel (the VPUX software layers' Runtime Kernel): each tile runs it. It takes the next
 * task from the tile's FIFO, waits for the task's barriers, calls the kernel as entry(argsAddr,
 * argsSize) on the tile's stack (the device set sp to the top of WIN_F), then updates the barriers the
 * task produces and consumes. Reading an empty FIFO or unfired barriers puts the tile to sleep
 * (the device stops it and resumes it at the same loop when a push or a barrier wakes it). */
#include "pydla/shave.h"

/* The control page is read with 32-bit accesses: the generated structs are packed (alignment 1), so
 * the registers are addressed through their offsets, not through the struct. */
#define CTRL(field) (*(volatile uint32_t *)(uintptr_t)(SHAVE_RT_CTRL + offsetof(shave_ctrl_page_t, field)))

typedef void (*kernel_entry_t)(uint32_t argsAddr, uint32_t argsSize);

void runtime_main(void) {
    for (;;) {
        while (CTRL(fifo_pop) == 0) {
        }
        uint32_t wait = CTRL(task_wait_mask);
        if (wait != 0) {
            CTRL(barrier_wait) = wait;
            while (CTRL(barrier_wait) == 0) {
            }
        }
        kernel_entry_t entry = (kernel_entry_t)(uintptr_t)CTRL(task_entry);
        entry(CTRL(task_args), CTRL(task_args_size));
        CTRL(barrier_produced) = CTRL(task_update_mask);
        CTRL(barrier_consumed) = wait;
        CTRL(task_done) = 1;
    }
}
