"""The compiler: ONNX model -> loadable (needs the ``onnx`` extra)."""
