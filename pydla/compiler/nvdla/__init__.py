"""The INT8 back end for NVDLA's configurations: an ONNX model (calibrated float, QDQ or QOperator)
as an NVDLA Loadable (:func:`pydla.compiler.nvdla.compile.compile_nvdla`)."""
