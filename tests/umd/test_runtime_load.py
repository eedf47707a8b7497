"""Many threads on one runtime, and a thousand submits without growth of memory or handles."""

from __future__ import annotations

import gc
import threading
import tracemalloc

import numpy as np

import pydla
from pydla.compiler.api import compile_model
from pydla.demo import build_demo_model, reference


def test_eight_threads_submitting_to_one_runtime() -> None:
    model = build_demo_model()
    blob = compile_model(model).blob
    with pydla.createRuntime() as rt:
        rt.load(blob)
        d_in, d_out = rt.getInputTensorDesc(0), rt.getOutputTensorDesc(0)
        lock, errors = threading.Lock(), []

        def work(seed: int) -> None:
            rng = np.random.default_rng(seed)
            try:
                for _ in range(4):
                    x = rng.standard_normal(d_in.dims).astype(np.float32)
                    with lock:  # bindings belong to the runtime: one thread binds and runs at a time
                        mi, mo = rt.allocateSystemMemory(d_in.size), rt.allocateSystemMemory(d_out.size)
                        mi.array(np.float32, d_in.dims)[...] = x
                        rt.bindInputTensor(0, mi)
                        rt.bindOutputTensor(0, mo)
                        (sync,) = rt.submitNonBlocking()
                    sync.wait(30_000)
                    got = mo.array(np.float32, d_out.dims).copy()
                    np.testing.assert_allclose(got, reference(model, {"input": x})[0], atol=1e-5)
                    with lock:
                        rt.freeSystemMemory(mi)
                        rt.freeSystemMemory(mo)
            except Exception as e:  # reported below
                errors.append(e)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not any(t.is_alive() for t in threads), "a thread did not finish"  # (its errors unread)
        assert not errors, errors


def test_a_thousand_submits_without_growth() -> None:
    blob = compile_model(build_demo_model()).blob
    with pydla.createRuntime() as rt:
        rt.load(blob)
        d_in, d_out = rt.getInputTensorDesc(0), rt.getOutputTensorDesc(0)
        rt.bindInputTensor(0, rt.allocateSystemMemory(d_in.size))
        rt.bindOutputTensor(0, rt.allocateSystemMemory(d_out.size))
        kmd = rt.handle.kmd
        tracemalloc.start()  # before the warm-up: what it allocates and later frees must be traced
        for _ in range(150):  # warm up caches and the driver's history ring (64 jobs)
            rt.submit()
        buffers = kmd.stats()["buffers"]
        gc.collect()
        before = tracemalloc.take_snapshot()
        for _ in range(1000):
            rt.submit()
        gc.collect()
        after = tracemalloc.take_snapshot()
        tracemalloc.stop()
        grown = sum(s.size_diff for s in after.compare_to(before, "filename"))
        assert kmd.stats()["buffers"] == buffers
        assert kmd.stats()["queued"] == 0 and kmd.stats()["running"] is None
        assert grown < 512 * 1024, f"{grown} bytes more after 1000 submits"
