"""The compiler's graph: nodes as the import keeps them, and the tensors' static shapes, element
types and known values (constants and folded results)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pydla.logconfig import printable


@dataclass
class Node:
    name: str
    op_type: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any]

    def where(self) -> str:
        """How messages name the node (as text on one line, whatever its name holds)."""
        return f"node '{printable(self.name)}' ({printable(self.op_type)})"


@dataclass
class Graph:
    inputs: list[str]
    outputs: list[str]
    shapes: dict[str, tuple[int, ...]]
    dtypes: dict[str, np.dtype[Any]]
    consts: dict[str, np.ndarray] = field(default_factory=dict)
    nodes: list[Node] = field(default_factory=list)
    opset: int = 13
    # The names the loadable gives the outputs (``outputs`` may hold internal names instead: see
    # :func:`_distinct_outputs`).
    output_names: list[str] = field(default_factory=list)
    # Operators the target computes whole, which the import would otherwise write as others
    # (LayerNormalization, on a device with SHAVE tiles: see pydla.compiler.shave_ops).
    whole: frozenset[str] = frozenset()
    # The opsets the model imports, by domain (the default one's is ``opset``): shape inference of the
    # graph as folded sees them all.
    imports: dict[str, int] = field(default_factory=dict)
    # The float32 inputs and outputs that the loadable keeps float16, as the model declared them
    # (a float16 model compiled at fp16 precision: see pydla.compiler.half).
    half_io: frozenset[str] = frozenset()

    def is_empty(self, name: str) -> bool:
        """A tensor with a dimension of 0: it holds nothing, so it is known (a constant)."""
        return name in self.consts and self.consts[name].size == 0
