"""Where the device's time goes on the networks of bench_session.py: each decoded operation timed
by the kernel it runs, ranked.

The device's decode functions (pydla.hw.blocks: decode_conv, decode_sdp, decode_pdp, decode_bdma,
run_cdp, run_rubik) are wrapped before the session is made, so that every decoded operation is a
timed call labelled by its kernel, chosen from its registers as pydla.hw.conv chooses the path:

- conv 1x1 (one product), conv shift-GEMM (tap-major weights), conv depthwise (channels-first
  batched product, or channels-last on maps of at most 64 output pixels), conv im2col / wide im2col,
  conv deconv; each with the flying SDP it feeds counted apart as "sdp (flying)";
- sdp: from memory (element-wise, activation, LUT), pdp (whole-map window or general), cdp, rubik,
  bdma;
- "rest": the run's time outside every kernel: the runtime, the KMD, the firmware, the register
  writes and interrupts, the SHAVE tiles' operations (the encoder's Softmax, LayerNormalization and
  Gelu), CPU runs.

Each network: --runs runs after 3 untimed ones; per kernel the total milliseconds per run, the
share of the run and the number of calls per run. The wrapper costs ~1 us a call (perf_counter
twice), counted in the kernels.

Run: python bench/bench_profile.py [--nets NAME,...] [--size N] [--runs 10] [--threads N]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

TIMES: dict[str, float] = defaultdict(float)
CALLS: dict[str, int] = defaultdict(int)


def _timed(label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def run(*args: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args)
        finally:
            TIMES[label] += time.perf_counter() - t0
            CALLS[label] += 1
    return run


def _conv_label(r: Any) -> str:
    from pydla.deviceapi.generated import dla_regs as R
    from pydla.hw.conv_depthwise import CHANNELS_LAST_PIXELS
    from pydla.hw.conv_gemm import WIDE_MAX_EXTRA, WIDE_MIN_WIDTH

    if r.d_mode != R.conv_mode_e.DIRECT:
        return "conv deconv"
    kh, kw, cg, groups = r.d_wt_height, r.d_wt_width, r.d_wt_channels, r.d_groups
    ho, wo = r.d_out_height, r.d_out_width
    if cg == 1 and groups == r.d_src.channels and groups > 1:
        return "conv depthwise" + (" (channels-last)" if ho * wo <= CHANNELS_LAST_PIXELS else "")
    if r.d_wt_format == R.conv_weight_format_e.RSKC and groups == 1 and kh * kw > 1:
        return "conv shift-GEMM (RSKC)"
    if kh == kw == 1 and r.d_stride_x == r.d_stride_y == 1:
        return "conv 1x1"
    extra = (kw - 1) * r.d_dilation_x // r.d_stride_x
    if kh * kw > 1 and wo >= WIDE_MIN_WIDTH and extra <= wo * WIDE_MAX_EXTRA:
        return f"conv wide im2col {kh}x{kw}"
    return f"conv im2col {kh}x{kw}"


def install() -> None:
    """Wrap pydla.hw.blocks' decode functions (before any session decodes)."""
    from pydla.deviceapi.generated import dla_regs as R
    from pydla.hw import blocks

    decode_conv, decode_sdp, decode_pdp = blocks.decode_conv, blocks.decode_sdp, blocks.decode_pdp
    decode_bdma, run_cdp, run_rubik = blocks.decode_bdma, blocks.run_cdp, blocks.run_rubik

    def conv(r: Any, mem: Any, out: Any = None, addends: Any = None) -> Any:
        return _timed(_conv_label(r), decode_conv(r, mem, out, addends))

    def sdp(r: Any, mem: Any) -> Any:
        if r.d_src_mode == R.sdp_src_mode_e.FLYING:
            label = "sdp (flying)"
        elif r.d_act == R.sdp_act_e.LUT:
            label = "sdp LUT (memory)"
        elif r.d_ew_op != R.sdp_ew_op_e.NONE:
            label = "sdp element-wise (memory)"
        else:
            label = "sdp other (memory)"
        return _timed(label, decode_sdp(r, mem))

    def pdp(r: Any, mem: Any) -> Any:
        whole = r.d_kernel_height == r.d_src.height and r.d_kernel_width == r.d_src.width
        return _timed("pdp whole-map" if whole else "pdp pooling", decode_pdp(r, mem))

    blocks.decode_conv = conv  # type: ignore[assignment]
    blocks.decode_sdp = sdp  # type: ignore[assignment]
    blocks.decode_pdp = pdp  # type: ignore[assignment]
    blocks.decode_bdma = lambda r, mem: _timed("bdma", decode_bdma(r, mem))  # type: ignore[assignment]
    blocks.run_cdp = _timed("cdp", run_cdp)  # type: ignore[assignment]
    blocks.run_rubik = _timed("rubik", run_rubik)  # type: ignore[assignment]


def profile(name: str, size: int, runs: int) -> None:
    import bench_session as b

    import pydla

    build, default, _ = b.NETWORKS[name]
    size = size or default
    model = build(size)
    feeds, shapes = b.feeds_of(name, model, size)
    sess = pydla.Session(model, input_shapes=shapes or None)
    try:
        for _ in range(3):
            sess.run(feeds)
        TIMES.clear()
        CALLS.clear()
        t0 = time.perf_counter()
        for _ in range(runs):
            sess.run(feeds)
        total = (time.perf_counter() - t0) / runs * 1e3
    finally:
        sess.close()
    kernels = sum(TIMES.values()) / runs * 1e3
    print(f"{name} {size}: {total:.2f} ms a run (mean of {runs}); kernels {kernels:.2f} ms")
    rows = sorted(TIMES.items(), key=lambda kv: -kv[1])
    rows.append(("rest (runtime, KMD, firmware, SHAVE, CPU)", (total - kernels) * runs / 1e3))
    for label, seconds in sorted(rows, key=lambda kv: -kv[1]):
        ms = seconds / runs * 1e3
        calls = CALLS.get(label, 0) // runs
        print(f"  {label:44s} {ms:8.2f} ms {100 * ms / total:5.1f}%  {calls:4d} calls")


def main() -> None:
    import bench_session as b

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nets", default=",".join(b.NETWORKS), help="comma-separated networks")
    parser.add_argument("--size", type=int, default=0, help="input size (default: each network's)")
    parser.add_argument("--runs", type=int, default=10, help="timed runs per network (default 10)")
    parser.add_argument("--threads", type=int, default=None, help="BLAS threads (OPENBLAS_NUM_THREADS)")
    args = parser.parse_args()
    if args.threads is not None and os.environ.get("OPENBLAS_NUM_THREADS") != str(args.threads):
        os.environ["OPENBLAS_NUM_THREADS"] = str(args.threads)
        os.execv(sys.executable, [sys.executable, *sys.argv])
    os.environ.setdefault("PYDLA_CACHE_DIR", tempfile.mkdtemp(prefix="pydla-bench-"))
    install()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; "
          f"BLAS threads {os.environ.get('OPENBLAS_NUM_THREADS', 'as set')}")
    for name in args.nets.split(","):
        profile(name.strip(), args.size, args.runs)


if __name__ == "__main__":
    main()
