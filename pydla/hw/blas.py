"""Single-precision GEMM straight from the BLAS library numpy itself uses, through ctypes.

numpy's ``matmul`` cannot accumulate into its output (``C += A @ B``): a convolution computed as a
sum of kernel-tap products would need a temporary and an extra pass per tap. BLAS ``sgemm`` with
beta = 1 accumulates in place, and takes operands with a leading dimension, so a tap's input is a
plain offset into the padded input (no im2col copy). The library is the OpenBLAS numpy wheels bundle
(``numpy.libs``); where it cannot be found, or its ``sgemm`` fails a self-check at load, ``SGEMM`` is
None and callers use numpy.

Kernel choice. OpenBLAS picks its kernels from the CPU model when it loads, and a model newer than
the release (AMD Zen 5, family 26, in OpenBLAS 0.3.31) gets the Haswell (AVX2) kernels even where
the CPU has AVX-512: half the speed of its SkylakeX kernels there (measured: a 64x576 by 576x3136
product 1.00 ms against 0.56 ms). When the CPU reports AVX-512 and numpy's instance runs other
kernels, pydla loads a private instance of the same library with ``OPENBLAS_CORETYPE=SkylakeX``: a
copy in the cache directory (the dynamic loader shares one instance per file), self-checked like
the other. numpy's own instance, and so the application's numpy, is left as it is.
``PYDLA_BLAS_CORE`` overrides the choice: ``numpy`` (numpy's instance as it is), or an OpenBLAS core
name (``Haswell``, ``SkylakeX``...) for a private instance with those kernels.
``PYDLA_NO_BLAS_SGEMM=1`` turns the direct path off altogether.

Threads. ``PYDLA_BLAS_THREADS`` (``auto``, the default, or a count) sets how many threads the
device's products run on; ``auto`` uses one when other processes take the cores (OpenBLAS's
threads then cost 10x what they give): see :mod:`pydla.hw.blas_threads`.

Usage::

    if SGEMM is not None:
        SGEMM.gemm(a, b_base, b_offset, b_ld, n, c, accumulate=True)
        SGEMM.product(a, b, c)      # c = a @ b for 2-D float32 views; False when it cannot
"""

from __future__ import annotations

import ctypes
import glob
import os
import shutil
import warnings
from typing import Any

import numpy as np
import numpy.typing as npt

from pydla.cachedir import cache_dir
from pydla.hw.blas_threads import ThreadPolicy

_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112
_ITEM = 4
# (symbol, 64-bit integers): the names scipy-openblas and plain OpenBLAS builds export.
_SYMBOLS = (("scipy_cblas_sgemm64_", True), ("cblas_sgemm64_", True), ("scipy_cblas_sgemm", False),
            ("cblas_sgemm", False))
# (set, get) of the library's thread count.
_THREAD_SYMBOLS = (("scipy_openblas_set_num_threads64_", "scipy_openblas_get_num_threads64_"),
                   ("scipy_openblas_set_num_threads", "scipy_openblas_get_num_threads"),
                   ("openblas_set_num_threads64_", "openblas_get_num_threads64_"),
                   ("openblas_set_num_threads", "openblas_get_num_threads"))
_CORENAME_SYMBOLS = ("scipy_openblas_get_corename64_", "scipy_openblas_get_corename",
                     "openblas_get_corename64_", "openblas_get_corename")
# The CPU flags OpenBLAS's SkylakeX kernels need, and the cores that already have such kernels.
_AVX512_FLAGS = frozenset({"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"})
_AVX512_CORES = frozenset({"skylakex", "cooperlake", "sapphirerapids"})


class Sgemm:
    """Row-major ``C[m, n] (+)= A[m, k] @ B[k, n]`` on float32 buffers given by address.

    ``core`` names the library's kernels (as OpenBLAS reports them) and ``private`` says whether
    this is pydla's own instance rather than numpy's; ``threads``, when given, sets the library's
    thread count before each product (see :mod:`pydla.hw.blas_threads`)."""

    def __init__(self, function: Any, int_type: Any, core: str = "", private: bool = False,
                 threads: ThreadPolicy | None = None) -> None:
        self.threads = threads
        self._int = int_type
        # The same function without argument conversion, for prepared products (their arguments are
        # ctypes values made once: 0.7 us a call against 9 us with conversion, 19 us for product()).
        address = ctypes.cast(function, ctypes.c_void_p).value
        self._bare = ctypes.CFUNCTYPE(None)(address) if address else function
        self._fn = function
        self._fn.restype = None
        self._fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, int_type, int_type, int_type,
                             ctypes.c_float, ctypes.c_void_p, int_type, ctypes.c_void_p, int_type,
                             ctypes.c_float, ctypes.c_void_p, int_type]
        self.core = core
        self.private = private

    def gemm(self, a: npt.NDArray[np.float32], b: npt.NDArray[np.float32], b_offset: int, ldb: int, n: int,
             c: npt.NDArray[np.float32], *, accumulate: bool) -> None:
        """``c (+)= a @ B`` where B is the (a.shape[1], n) matrix at element ``b_offset`` of the
        C-contiguous ``b`` with rows ``ldb`` elements apart. ``a`` and ``c`` are C-contiguous; every
        element either touches is checked to lie inside its array (a bad call would corrupt memory)."""
        m, k = a.shape
        if not (a.dtype == b.dtype == c.dtype == np.float32 and a.flags.c_contiguous
                and b.flags.c_contiguous and c.flags.c_contiguous and c.shape == (m, n)):
            raise ValueError("sgemm: float32 C-contiguous operands of matching shapes are required")
        if m < 1 or n < 1 or k < 1 or b_offset < 0 or ldb < n or b_offset + (k - 1) * ldb + n > b.size:
            raise ValueError(f"sgemm: B ({k}x{n} at {b_offset}, ld {ldb}) is outside its {b.size} elements")
        if self.threads is not None:
            self.threads.before_product()
        self._fn(_ROW_MAJOR, _NO_TRANS, _NO_TRANS, m, n, k, 1.0, a.ctypes.data, k,
                 b.ctypes.data + 4 * b_offset, ldb, 1.0 if accumulate else 0.0, c.ctypes.data, n)

    def product(self, a: npt.NDArray[Any], b: npt.NDArray[Any], c: npt.NDArray[Any], *,
                accumulate: bool = False) -> bool:
        """``c (+)= a @ b`` for 2-D float32 arrays whose rows (or, for ``a`` and ``b``, columns) are
        unit-stride, as BLAS takes them; ``c`` must not overlap ``a`` or ``b``. Returns False, having
        done nothing, for operands BLAS cannot take as they lie (the caller then uses numpy).

        Each operand's pointer, shape and strides come from the numpy view itself, so BLAS touches
        only the view's own elements."""
        checked = _operands(a, b, c)
        if checked is None:
            return False
        (m, n, k), la, lb, lc = checked
        if self.threads is not None:
            self.threads.before_product()
        self._fn(_ROW_MAJOR, la[1], lb[1], m, n, k, 1.0, a.ctypes.data, la[0], b.ctypes.data, lb[0],
                 1.0 if accumulate else 0.0, c.ctypes.data, lc[0])
        return True

    def prepare(self, a: npt.NDArray[Any], b: npt.NDArray[Any], c: npt.NDArray[Any], *,
                accumulate: bool = False) -> PreparedProduct | None:
        """:meth:`product` checked once, for operands that stay where they are: a function that
        computes ``c (+)= a @ b`` on whatever they hold when it is called, or None (as product's
        False) for operands BLAS cannot take as they lie."""
        checked = _operands(a, b, c)
        if checked is None or not c.flags.writeable:
            return None
        (m, n, k), la, lb, lc = checked
        ints = (self._int(m), self._int(n), self._int(k))
        args = (ctypes.c_int(_ROW_MAJOR), ctypes.c_int(la[1]), ctypes.c_int(lb[1]), *ints,
                ctypes.c_float(1.0), ctypes.c_void_p(a.ctypes.data), self._int(la[0]),
                ctypes.c_void_p(b.ctypes.data), self._int(lb[0]), ctypes.c_float(1.0 if accumulate else 0.0),
                ctypes.c_void_p(c.ctypes.data), self._int(lc[0]))
        return PreparedProduct(self._bare, args, (a, b, c), self.threads)


class PreparedProduct:
    """``c (+)= a @ b`` on operands checked once (:meth:`Sgemm.prepare`); holds them, so that the
    memory BLAS is given stays allocated as long as the call can be made.

    Usage::

        run = SGEMM.prepare(w, x, y, accumulate=True)
        if run is not None:
            run()                          # y += w @ x, on what w, x and y hold now
    """

    __slots__ = ("_args", "_fn", "_operands", "_threads")

    def __init__(self, fn: Any, args: tuple[Any, ...], operands: tuple[npt.NDArray[Any], ...],
                 threads: ThreadPolicy | None) -> None:
        self._fn, self._args, self._operands, self._threads = fn, args, operands, threads

    def __call__(self) -> None:
        if self._threads is not None:
            self._threads.before_product()
        self._fn(*self._args)


def _operands(a: npt.NDArray[Any], b: npt.NDArray[Any], c: npt.NDArray[Any]) \
        -> tuple[tuple[int, int, int], tuple[int, int], tuple[int, int], tuple[int, int]] | None:
    """((m, n, k), and the layouts of a, b and c) when ``c = a @ b`` is a product BLAS can take as
    the operands lie: 2-D float32, shapes that agree, unit-stride rows (or columns for a and b),
    ``c`` row-major and overlapping neither; else None."""
    if not (a.ndim == b.ndim == c.ndim == 2 and a.dtype == b.dtype == c.dtype == np.float32):
        return None
    m, k = a.shape
    n = b.shape[1]
    if b.shape[0] != k or c.shape != (m, n) or m < 1 or n < 1 or k < 1:
        return None
    la, lb, lc = _layout(a), _layout(b), _layout(c)
    if la is None or lb is None or lc is None or lc[1] != _NO_TRANS or np.may_share_memory(c, a) \
            or np.may_share_memory(c, b):
        return None
    return (m, n, k), la, lb, lc


def _layout(x: npt.NDArray[Any]) -> tuple[int, int] | None:
    """(leading dimension, transpose flag) of a 2-D float32 view as row-major BLAS takes it, or None
    (neither its rows nor its columns are unit-stride, or they overlap)."""
    rows, cols = x.shape
    s0, s1 = x.strides
    if (s1 == _ITEM or cols == 1) and s0 % _ITEM == 0:
        ld = s0 // _ITEM if rows > 1 else cols
        return (ld, _NO_TRANS) if ld >= cols else None
    if (s0 == _ITEM or rows == 1) and s1 % _ITEM == 0:
        ld = s1 // _ITEM if cols > 1 else rows
        return (ld, _TRANS) if ld >= rows else None
    return None


def _candidates() -> list[str]:
    root = os.path.dirname(os.path.dirname(np.__file__))
    found: list[str] = []
    for pattern in ("numpy.libs/libscipy_openblas*.so*", "numpy.libs/libopenblas*.so*",
                    "numpy/.dylibs/libscipy_openblas*.dylib", "numpy/.dylibs/libopenblas*.dylib"):
        found += sorted(glob.glob(os.path.join(root, pattern)))
    return found


def _self_check(s: Sgemm) -> bool:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 5)).astype(np.float32)
    b = rng.standard_normal((5 * 9 + 4,)).astype(np.float32)
    c = np.ones((3, 4), np.float32)
    s.gemm(a, b, 2, 9, 4, c, accumulate=True)
    expect = 1 + a @ b[2:2 + 5 * 9].reshape(5, 9)[:, :4]
    return bool(np.allclose(c, expect, rtol=1e-5, atol=1e-5))


def corename(lib: Any) -> str:
    """The kernels an OpenBLAS instance runs (``Haswell``, ``SkylakeX``...), or "" if it won't say."""
    for symbol in _CORENAME_SYMBOLS:
        fn = getattr(lib, symbol, None)
        if fn is not None:
            fn.restype = ctypes.c_char_p
            fn.argtypes = []
            name = fn()
            return name.decode("ascii", "replace").strip() if name else ""
    return ""


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags as Linux lists them (empty where /proc/cpuinfo is not available)."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return frozenset()


def wanted_core(numpy_core: str, flags: frozenset[str], setting: str | None) -> str | None:
    """The OpenBLAS core a private instance should run, or None to keep numpy's instance.

    ``setting`` is ``PYDLA_BLAS_CORE``: unset or ``auto`` chooses SkylakeX where the CPU has
    AVX-512 and numpy's instance runs kernels without it; ``numpy`` keeps numpy's; anything else is
    a core name, used as given."""
    choice = (setting or "auto").strip()
    if choice.lower() == "numpy":
        return None
    if choice.lower() != "auto":
        return choice
    if numpy_core.lower() in _AVX512_CORES or not _AVX512_FLAGS <= flags:
        return None
    return "SkylakeX"


def _private_copy(path: str) -> str:
    """A copy of the library at ``path`` in the cache directory, made once (atomically, with the
    original's time stamp) and made again when its size or time stamp no longer match. A copy that
    another user owns, or that others may write, is code someone else could have changed: refused
    (OSError)."""
    source = os.stat(path)
    target = cache_dir() / "blas" / os.path.basename(path)
    try:
        have = target.stat()
    except FileNotFoundError:
        have = None
    if have is None or have.st_size != source.st_size or have.st_mtime_ns != source.st_mtime_ns:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        try:
            shutil.copy2(path, tmp)
            os.chmod(tmp, 0o755)  # the user's own, whatever the shared original allows
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
        have = target.stat()
    if hasattr(os, "getuid") and (have.st_uid != os.getuid() or have.st_mode & 0o022):
        raise OSError(f"{target}: not the user's own, or writable by others")
    return str(target)


def _private_instance(path: str, core: str) -> Any | None:
    """The library at ``path`` loaded once more, from its own file, running ``core``'s kernels
    (OpenBLAS reads ``OPENBLAS_CORETYPE`` as it loads); None if that cannot be done."""
    try:
        copy = _private_copy(path)
    except OSError:
        return None
    before = os.environ.get("OPENBLAS_CORETYPE")
    os.environ["OPENBLAS_CORETYPE"] = core
    try:
        lib = ctypes.CDLL(copy)
    except OSError:
        return None
    finally:
        if before is None:
            del os.environ["OPENBLAS_CORETYPE"]
        else:
            os.environ["OPENBLAS_CORETYPE"] = before
    return lib if corename(lib).lower() == core.lower() else None


def thread_policy(lib: Any) -> ThreadPolicy | None:
    """The thread policy of an OpenBLAS instance (``PYDLA_BLAS_THREADS``), or None where the
    library does not export its thread-count functions."""
    for set_name, get_name in _THREAD_SYMBOLS:
        set_fn, get_fn = getattr(lib, set_name, None), getattr(lib, get_name, None)
        if set_fn is not None and get_fn is not None:
            set_fn.argtypes, set_fn.restype = [ctypes.c_int], None
            get_fn.argtypes, get_fn.restype = [], ctypes.c_int
            return ThreadPolicy(set_fn, int(get_fn()), os.environ.get("PYDLA_BLAS_THREADS"))
    return None


def _sgemm_of(lib: Any, private: bool) -> Sgemm | None:
    for symbol, ilp64 in _SYMBOLS:
        fn = getattr(lib, symbol, None)
        if fn is None:
            continue
        s = Sgemm(fn, ctypes.c_int64 if ilp64 else ctypes.c_int32, corename(lib), private)
        try:
            if _self_check(s):
                return s
        except (ValueError, OSError):
            pass
    return None


def _load() -> Sgemm | None:
    if os.environ.get("PYDLA_NO_BLAS_SGEMM"):
        return None
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        numpy_sgemm = _sgemm_of(lib, private=False)
        if numpy_sgemm is None:
            continue
        setting = os.environ.get("PYDLA_BLAS_CORE")
        core = wanted_core(numpy_sgemm.core, cpu_flags(), setting)
        if core is not None:
            own = _private_instance(path, core)
            private_sgemm = _sgemm_of(own, private=True) if own is not None else None
            if private_sgemm is not None:
                private_sgemm.threads = thread_policy(own)
                return private_sgemm
            if setting and setting.strip().lower() != "auto":
                warnings.warn(f"PYDLA_BLAS_CORE={setting}: OpenBLAS has no such core here, or the copy "
                              f"in {cache_dir() / 'blas'} could not be made; using numpy's "
                              f"({numpy_sgemm.core or 'unknown'} kernels)", RuntimeWarning, stacklevel=2)
        numpy_sgemm.threads = thread_policy(lib)
        return numpy_sgemm
    return None


SGEMM: Sgemm | None = _load()


def before_numpy_product() -> None:
    """Apply the thread policy before a product the device computes with numpy's matmul: numpy's
    instance is the one :data:`SGEMM` sets when it is not a private instance."""
    if SGEMM is not None and not SGEMM.private and SGEMM.threads is not None:
        SGEMM.threads.before_product()


def describe() -> str:
    """One line on which BLAS the device's products run, e.g. for ``pydla demo``."""
    if SGEMM is None:
        return "numpy's matmul (OpenBLAS sgemm not found or turned off)"
    kernels = f"{SGEMM.core} kernels" if SGEMM.core else "kernels it does not name"
    owner = ("pydla's private instance (PYDLA_BLAS_CORE=numpy uses numpy's)" if SGEMM.private
             else "numpy's instance")
    policy = SGEMM.threads
    threads = ""
    if policy is not None:
        threads = (f", {policy.fixed} threads (PYDLA_BLAS_THREADS)" if policy.fixed is not None
                   else f", up to {policy.default} threads (fewer while other processes take the cores)")
    return f"OpenBLAS sgemm, {kernels}, {owner}{threads}"
