"""``pydla.InferenceSession``: a :class:`pydla.Session` with onnxruntime's constructor and ``run``.

Usage::

    sess = pydla.InferenceSession("model.onnx", providers=["CPUExecutionProvider"])
    probabilities, = sess.run(None, {sess.get_inputs()[0].name: x})
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Any

import numpy as np

from pydla.errors import DlaError, NvError
from pydla.session import Session
from pydla.session_ort import check_providers

# pydla's keyword arguments that InferenceSession passes on to Session, and onnxruntime's keyword
# arguments that change nothing here (accepted so that code written for onnxruntime runs as is).
_SESSION_KEYWORDS = frozenset({"port", "config", "device", "precision", "timeout_ms", "path", "input_shapes",
                               "trace", "max_shapes"})
_ORT_KEYWORDS_WITHOUT_EFFECT = frozenset({"disabled_optimizers", "read_config_from_model"})


class InferenceSession(Session):
    """A :class:`Session` with onnxruntime's constructor and ``run``: swap
    ``onnxruntime.InferenceSession`` for ``pydla.InferenceSession`` and the code runs on pydla.

    Usage::

        sess = pydla.InferenceSession("model.onnx", providers=["CPUExecutionProvider"])
        name = sess.get_inputs()[0].name
        probabilities, = sess.run(None, {name: x})

    Parameters:
        path_or_bytes: the model, as :class:`Session` takes it (an ONNX or .dla path, bytes, or an
            ``onnx.ModelProto``).
        sess_options: an onnxruntime SessionOptions, or None. ``enable_profiling`` traces the
            session to ``<profile_file_prefix>_<date>_<time>.json`` (as onnxruntime names its
            profile; :meth:`end_profiling` returns it); the rest has no effect.
        providers: None, or a list of provider names or (name, options) pairs: no effect (the
            model runs on pydla's device, ``get_providers()`` says so).
        provider_options: None, or a list of dicts: no effect.
        **kwargs: :class:`Session`'s keywords (port, config, device, precision, timeout_ms, path,
            input_shapes, trace, max_shapes); anything else is refused with DlaError BadParameter.
    """

    def __init__(self, path_or_bytes: Any, sess_options: Any = None,
                 providers: Sequence[str | tuple[str, dict[Any, Any]]] | None = None,
                 provider_options: Sequence[dict[Any, Any]] | None = None, **kwargs: Any) -> None:
        unknown = sorted(set(kwargs) - _SESSION_KEYWORDS - _ORT_KEYWORDS_WITHOUT_EFFECT)
        if unknown:
            raise DlaError(NvError.BadParameter,
                           f"InferenceSession: unknown keyword argument(s) {unknown}: pydla takes "
                           f"{sorted(_SESSION_KEYWORDS)} besides onnxruntime's sess_options, providers "
                           "and provider_options")
        check_providers(providers, provider_options)
        options = {k: v for k, v in kwargs.items() if k in _SESSION_KEYWORDS}
        if getattr(sess_options, "enable_profiling", False) is True and options.get("trace") is None:
            options["trace"] = profile_file(getattr(sess_options, "profile_file_prefix", None))
        self._sess_options = sess_options
        super().__init__(path_or_bytes, **options)

    def run(self, output_names: Any = None, input_feed: Any = None,  # type: ignore[override]
            run_options: Any = None, *, outputs: Any = None) -> list[np.ndarray]:
        """onnxruntime's run: the arrays of ``output_names`` (None or [] for every output), in
        that order, for ``input_feed`` ({input name: array}); ``run_options`` has no effect.
        ``outputs``: arrays to write the outputs into, as :meth:`Session.run` takes them.

        Usage: ``probabilities, = sess.run(None, {"input": x})``
        """
        return self._run_ort(output_names, input_feed, run_options, "InferenceSession.run", outputs)

    def __enter__(self) -> InferenceSession:
        return self


def profile_file(prefix: Any) -> str:
    """onnxruntime's profile file name: ``<prefix>_<YYYY-MM-DD_HH-MM-SS_mmm>.json`` (the default
    prefix is onnxruntime's, "onnxruntime_profile_")."""
    prefix = prefix if isinstance(prefix, str) and prefix else "onnxruntime_profile_"
    now = datetime.datetime.now()
    return f"{prefix}_{now:%Y-%m-%d_%H-%M-%S}_{now.microsecond // 1000:03d}.json"
