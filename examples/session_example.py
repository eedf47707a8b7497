"""pydla.Session on the demo model: numpy in, numpy out (the ONNX model is compiled on first use
and cached).

Run: python examples/session_example.py   (from any directory)
"""

from pathlib import Path

import numpy as np

import pydla

model = Path(__file__).with_name("demo_model.onnx")  # next to this script, wherever it is run from
x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
with pydla.Session(model) as sess:
    probabilities = sess.run({"input": x})["probabilities"]  # or: sess.run(None, {"input": x})[0]
print("probabilities:", " ".join(f"{p:.6f}" for p in probabilities[0]))
print("class:", int(probabilities.argmax()))
