"""Write the network `pydla demo` runs to examples/demo_model.onnx (random weights, no download).

Run: python examples/demo_model.py [output.onnx]
Then: pydla compile examples/demo_model.onnx -o demo.dla && pydla info demo.dla
"""

import sys
from pathlib import Path

import onnx

from pydla.demo import build_demo_model

out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("demo_model.onnx")
onnx.save(build_demo_model(), str(out))
print(f"wrote {out}")
