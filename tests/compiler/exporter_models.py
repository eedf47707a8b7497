"""Small models in the node patterns torch.onnx (opset 17) and tf2onnx emit, built with onnx.helper:
the shape arithmetic around attention (Shape -> Gather -> Unsqueeze -> Concat -> Reshape), scaled
dot-product attention's scale computed from a shape, expand's -1 handling (ConstantOfShape, Equal,
Where), causal masks (Range / Less / Where, or Trilu), LayerNormalization, Gelu via Erf, and
MobileNet-v3's squeeze-excite. Every model has symbolic dimensions (batch, sequence), as an
exporter's ``dynamic_axes`` leaves them, so it compiles only with input shapes.

The patterns are written out from what the exporters' symbolic functions emit, not copied from a
model file; the weights are random and small so that the tests stay fast.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

INT64_MAX = (1 << 63) - 1


class Exporter:
    """Builds a graph as an exporter names it: nodes '/scope/Op_k', outputs '/scope/Op_k_output_0',
    constants as Constant nodes (torch's form) or initializers (weights)."""

    def __init__(self, seed: int = 0) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.scope = ""
        self.counts: Counter[str] = Counter()
        self.rng = np.random.default_rng(seed)

    def op(self, op_type: str, inputs: list[str], outputs: int = 1, **attrs: Any) -> Any:
        key = f"{self.scope}/{op_type}"
        k = self.counts[key]
        self.counts[key] += 1
        name = f"{key}_{k}" if k else key
        outs = [f"{name}_output_{i}" for i in range(outputs)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=name, **attrs))
        return outs[0] if outputs == 1 else outs

    def const(self, value: Any, dtype: Any = np.int64) -> str:
        """A Constant node, as torch.onnx emits every literal."""
        return self.op("Constant", [], value=numpy_helper.from_array(np.asarray(value, dtype=dtype)))

    def weight(self, name: str, shape: tuple[int, ...], scale: float | None = None) -> str:
        fan_in = shape[0] if len(shape) == 2 else max(1, math.prod(shape[1:]))
        std = scale if scale is not None else 1 / math.sqrt(fan_in)
        self.inits.append(numpy_helper.from_array(
            (self.rng.standard_normal(shape) * std).astype(np.float32), name))
        return name

    def dim(self, tensor: str, index: int) -> str:
        """size(index) of a tensor: Shape -> Gather(scalar index), a 0-D int64."""
        return self.op("Gather", [self.op("Shape", [tensor]), self.const(index)], axis=0)

    def unsqueeze(self, x: str, axes: list[int]) -> str:
        return self.op("Unsqueeze", [x, self.const(axes)])

    def shape_of(self, *parts: str | int) -> str:
        """A 1-D shape from scalar tensors (Unsqueezed, as torch does) and literals, by Concat."""
        pieces = [self.unsqueeze(p, [0]) if isinstance(p, str) else self.const([p]) for p in parts]
        return self.op("Concat", pieces, axis=0)

    def linear(self, x: str, name: str, k: int, n: int) -> str:
        """nn.Linear on a 3-D input: MatMul by the transposed weight, then Add(bias, product)."""
        w = self.weight(f"{name}.weight_t", (k, n))
        b = self.weight(f"{name}.bias", (n,), 0.1)
        return self.op("Add", [b, self.op("MatMul", [x, w])])

    def layer_norm(self, x: str, name: str, d: int) -> str:
        """nn.LayerNorm at opset 17: LayerNormalization with one output."""
        scale = f"{name}.weight"
        self.inits.append(numpy_helper.from_array(
            (1 + 0.1 * self.rng.standard_normal(d)).astype(np.float32), scale))
        return self.op("LayerNormalization", [x, scale, self.weight(f"{name}.bias", (d,), 0.1)],
                       axis=-1, epsilon=1e-5)

    def gelu(self, x: str) -> str:
        """F.gelu before opset 20: x * 0.5 * (1 + erf(x / sqrt 2))."""
        erf = self.op("Erf", [self.op("Div", [x, self.const(1.4142135381698608, np.float32)])])
        half = self.op("Mul", [x, self.op("Add", [erf, self.const(1.0, np.float32)])])
        return self.op("Mul", [half, self.const(0.5, np.float32)])

    def model(self, inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto],
              opset: int = 17) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, "exported", inputs, outputs, self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="pytorch")
        m.ir_version = 8
        return m


def attention(e: Exporter, x: str, d: int, heads: int, mask: str | None, causal: str | None = None) -> str:
    """Multi-head self-attention in torch's export: q, k, v by Linear; each viewed as
    (B, T, H, d/H) with B and T read from the input's shape, transposed to heads first; the scale
    1/sqrt(d/H) computed from q's shape (scaled_dot_product_attention's export); ``mask`` an additive
    (B, 1, 1, T) float mask, ``causal`` an additive (T, T) one; the context back to (B, T, d)."""
    dh = d // heads
    b, t = e.dim(x, 0), e.dim(x, 1)
    heads_first = []
    for name in ("q_proj", "k_proj", "v_proj"):
        y = e.linear(x, f"{e.scope}.{name}", d, d)
        y = e.op("Reshape", [y, e.shape_of(b, t, heads, dh)])
        heads_first.append(e.op("Transpose", [y], perm=[0, 2, 1, 3]))
    q, k, v = heads_first
    # scale = 1 / sqrt(q.size(-1)), as a float computed from the shape
    last = e.op("Slice", [e.op("Shape", [q]), e.const([-1]), e.const([INT64_MAX])])
    scale = e.op("Div", [e.const(1.0, np.float32),
                         e.op("Sqrt", [e.op("Cast", [last], to=TensorProto.FLOAT)])])
    root = e.op("Sqrt", [scale])
    kt = e.op("Transpose", [k], perm=[0, 1, 3, 2])
    scores = e.op("MatMul", [e.op("Mul", [q, root]), e.op("Mul", [kt, root])])
    if mask is not None:
        scores = e.op("Add", [scores, mask])
    if causal is not None:
        scores = e.op("Add", [scores, causal])
    probs = e.op("Softmax", [scores], axis=-1)
    ctx = e.op("Transpose", [e.op("MatMul", [probs, v])], perm=[0, 2, 1, 3])
    ctx = e.op("Reshape", [ctx, e.shape_of(e.dim(x, 0), e.dim(x, 1), d)])
    return e.linear(ctx, f"{e.scope}.out_proj", d, d)


def encoder_layer(e: Exporter, x: str, i: int, d: int, heads: int, mask: str | None,
                  causal: str | None = None) -> str:
    """A pre-norm transformer layer: x + attn(ln1(x)), then h + mlp(ln2(h)) with Gelu."""
    scope = f"/layers.{i}"
    e.scope = f"{scope}/self_attn"
    h = e.op("Add", [x, attention(e, e.layer_norm(x, f"layers.{i}.norm1", d), d, heads, mask, causal)])
    e.scope = f"{scope}/mlp"
    up = e.gelu(e.linear(e.layer_norm(h, f"layers.{i}.norm2", d), f"layers.{i}.fc1", d, 2 * d))
    return e.op("Add", [h, e.linear(up, f"layers.{i}.fc2", 2 * d, d)])


def bert_encoder(layers: int = 2, d: int = 32, heads: int = 4, vocab: int = 50,
                 positions: int = 64, mask_form: str = "scaled") -> onnx.ModelProto:
    """Token ids and an attention mask, both (batch, sequence) int64: embeddings (token table Gather,
    positions by Range over the sequence length), the additive mask, ``layers`` pre-norm layers, a
    final LayerNorm. ``mask_form`` "scaled": BERT's (1 - mask) * -10000 as (B, 1, 1, T); "expanded":
    Hugging Face's _expand_mask, mask[:, None, None, :].expand(B, 1, T, T), 1 - it, then
    masked_fill(inverted.bool(), finfo.min) as Cast to bool and Where."""
    e = Exporter(1)
    e.scope = "/embeddings"
    tokens = e.op("Gather", [e.weight("embeddings.word", (vocab, d), 0.5), "input_ids"], axis=0)
    seq = e.dim("input_ids", 1)
    position_ids = e.op("Unsqueeze", [e.op("Range", [e.const(0), seq, e.const(1)]), e.const([0])])
    pos = e.op("Gather", [e.weight("embeddings.position", (positions, d), 0.5), position_ids], axis=0)
    x = e.op("Add", [tokens, pos])
    e.scope = ""
    m = e.unsqueeze(e.unsqueeze("attention_mask", [1]), [2])
    if mask_form == "expanded":
        b, t = e.dim("attention_mask", 0), e.dim("attention_mask", 1)
        m = e.op("Cast", [torch_expand(e, m, e.shape_of(b, 1, t, t))], to=TensorProto.FLOAT)
        inverted = e.op("Sub", [e.const(1.0, np.float32), m])
        lowest = e.const(float(np.finfo(np.float32).min), np.float32)
        m = e.op("Where", [e.op("Cast", [inverted], to=TensorProto.BOOL), lowest, inverted])
    else:
        m = e.op("Cast", [m], to=TensorProto.FLOAT)
        m = e.op("Mul", [e.op("Sub", [e.const(1.0, np.float32), m]), e.const(-10000.0, np.float32)])
    for i in range(layers):
        x = encoder_layer(e, x, i, d, heads, m)
    e.scope = ""
    out = e.layer_norm(x, "final_norm", d)
    e.nodes.append(helper.make_node("Identity", [out], ["last_hidden_state"], name="/Identity"))
    return e.model([helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "sequence"])
                    for name in ("input_ids", "attention_mask")],
                   [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT,
                                                  ["batch", "sequence", d])])


def torch_expand(e: Exporter, x: str, size: str) -> str:
    """tensor.expand(size) with -1 entries, as torch exports it: the -1 become 1 through
    ConstantOfShape(Shape(size)), Mul by -1, Equal and Where, then Expand."""
    ones = e.op("ConstantOfShape", [e.op("Shape", [size])],
                value=numpy_helper.from_array(np.array([1], np.int64)))
    minus = e.op("Mul", [ones, e.const(-1)])
    return e.op("Expand", [x, e.op("Where", [e.op("Equal", [size, minus]), ones, size])])


def vit(layers: int = 1, d: int = 32, heads: int = 4, patch: int = 4, image: int = 16,
        classes: int = 10) -> onnx.ModelProto:
    """A ViT: patch embedding (Conv with stride = patch), flatten(2) as a Reshape to a shape read
    from the input (Shape -> Slice -> Concat), transpose(1, 2), the class token expanded to the
    batch (torch's expand) and concatenated, position embedding, pre-norm layers, the class token's
    final LayerNorm and a Linear head."""
    e = Exporter(2)
    e.scope = "/patch_embed"
    conv = e.op("Conv", ["pixel_values", e.weight("patch.weight", (d, 3, patch, patch)),
                         e.weight("patch.bias", (d,), 0.1)], kernel_shape=[patch, patch],
                strides=[patch, patch])
    lead = e.op("Slice", [e.op("Shape", [conv]), e.const([0]), e.const([2]), e.const([0])])
    flat = e.op("Reshape", [conv, e.op("Concat", [lead, e.const([-1])], axis=0)])
    x = e.op("Transpose", [flat], perm=[0, 2, 1])
    e.scope = ""
    size = e.shape_of(e.dim("pixel_values", 0), -1, -1)
    cls = torch_expand(e, e.weight("cls_token", (1, 1, d), 0.5), size)
    x = e.op("Concat", [cls, x], axis=1)
    tokens = (image // patch) ** 2 + 1
    x = e.op("Add", [x, e.weight("pos_embed", (1, tokens, d), 0.5)])
    for i in range(layers):
        x = encoder_layer(e, x, i, d, heads, None)
    e.scope = ""
    first = e.op("Gather", [e.layer_norm(x, "norm", d), e.const(0)], axis=1)
    head = e.op("Gemm", [first, e.weight("head.weight", (classes, d)),
                         e.weight("head.bias", (classes,), 0.1)], transB=1)
    e.nodes.append(helper.make_node("Identity", [head], ["logits"], name="/Identity"))
    return e.model([helper.make_tensor_value_info("pixel_values", TensorProto.FLOAT,
                                                  ["batch", 3, image, image])],
                   [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", classes])])


def causal_mask(e: Exporter, x: str, form: str) -> str:
    """An additive (T, T) causal mask with T read from the input's shape. ``range``: the form of
    Hugging Face's _make_causal_mask, full((T, T), finfo.min) as ConstantOfShape, then
    masked_fill(arange(T) < (arange(T) + 1).view(T, 1), 0) as Range / Add / Reshape / Less / Where.
    ``trilu``: scaled_dot_product_attention(is_causal=True)'s export, ones as ConstantOfShape,
    Trilu, Equal to 0, Where(-inf, 0)."""
    t = e.dim(x, 1)
    if form == "range":
        lowest = float(np.finfo(np.float32).min)
        full = e.op("ConstantOfShape", [e.shape_of(t, t)],
                    value=numpy_helper.from_array(np.array([lowest], np.float32)))
        cond = e.op("Range", [e.const(0), e.dim(full, 1), e.const(1)])
        column = e.op("Reshape", [e.op("Add", [cond, e.const(1)]), e.shape_of(e.dim(full, 1), 1)])
        return e.op("Where", [e.op("Less", [cond, column]), e.const(0.0, np.float32), full])
    ones = e.op("ConstantOfShape", [e.shape_of(t, t)],
                value=numpy_helper.from_array(np.array([1.0], np.float32)))
    lower = e.op("Trilu", [ones, e.const(0)], upper=0)
    future = e.op("Equal", [lower, e.const(0.0, np.float32)])
    return e.op("Where", [future, e.const(float("-inf"), np.float32), e.const(0.0, np.float32)])


def gpt_block(form: str = "range", d: int = 32, heads: int = 4) -> onnx.ModelProto:
    """A GPT-style decoder block on embeddings (batch, sequence, d): causal self-attention and a
    Gelu MLP, pre-norm, with the causal mask built from the sequence length (``form``: see
    :func:`causal_mask`)."""
    e = Exporter(3)
    e.scope = "/h.0/attn"
    causal = causal_mask(e, "inputs_embeds", form)
    x = encoder_layer(e, "inputs_embeds", 0, d, heads, None, causal)
    e.scope = ""
    out = e.layer_norm(x, "ln_f", d)
    e.nodes.append(helper.make_node("Identity", [out], ["hidden_states"], name="/Identity"))
    return e.model([helper.make_tensor_value_info("inputs_embeds", TensorProto.FLOAT,
                                                  ["batch", "sequence", d])],
                   [helper.make_tensor_value_info("hidden_states", TensorProto.FLOAT,
                                                  ["batch", "sequence", d])])


def mobilenet_v3_block(c: int = 16, expand: int = 32, squeeze: int = 8, size: int = 12) -> onnx.ModelProto:
    """An inverted residual with squeeze-excite as torchvision's MobileNet-v3 exports (batch norms
    folded into the convolutions): 1x1 expand + HardSwish, 3x3 depthwise + HardSwish, SE
    (GlobalAveragePool, 1x1, Relu, 1x1, HardSigmoid(1/6, 0.5), Mul), 1x1 project, residual Add; then
    the classifier's pooling and a Flatten as Reshape to (B, -1) computed from the shape."""
    e = Exporter(4)
    e.scope = "/features.1/block"

    def conv(x: str, name: str, cin: int, cout: int, k: int, group: int = 1) -> str:
        return e.op("Conv", [x, e.weight(f"{name}.weight", (cout, cin // group, k, k)),
                             e.weight(f"{name}.bias", (cout,), 0.1)],
                    kernel_shape=[k, k], pads=[k // 2] * 4, group=group, strides=[1, 1])

    h = e.op("HardSwish", [conv("x", "expand", c, expand, 1)])
    h = e.op("HardSwish", [conv(h, "dw", expand, expand, 3, expand)])
    s = e.op("GlobalAveragePool", [h])
    s = e.op("Relu", [conv(s, "fc1", expand, squeeze, 1)])
    s = e.op("HardSigmoid", [conv(s, "fc2", squeeze, expand, 1)], alpha=1 / 6, beta=0.5)
    h = e.op("Mul", [s, h])
    y = e.op("Add", [conv(h, "project", expand, c, 1), "x"])
    e.scope = ""
    pooled = e.op("GlobalAveragePool", [y])
    flat = e.op("Reshape", [pooled, e.shape_of(e.dim(pooled, 0), -1)])
    e.nodes.append(helper.make_node("Identity", [flat], ["features"], name="/Identity"))
    e.nodes.append(helper.make_node("Identity", [y], ["block_out"], name="/Identity_1"))
    return e.model([helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", c, size, size])],
                   [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["batch", c]),
                    helper.make_tensor_value_info("block_out", TensorProto.FLOAT, ["batch", c, size, size])],
                   opset=17)


def tf2onnx_reshape(d: int = 8) -> onnx.ModelProto:
    """tf2onnx's shape arithmetic on an NHWC input (N, H, W, C) with N symbolic: Shape, Cast to
    int32, StridedSlice as Slice, Pack as Unsqueeze + Concat of int32, Cast back to int64, Reshape
    to (N, H * W, C) with H * W computed by Mul; Squeeze of a size-1 axis; a MatMul."""
    e = Exporter(5)
    e.scope = "/model"
    shape = e.op("Cast", [e.op("Shape", ["input:0"])], to=TensorProto.INT32)
    n, h, w = (e.op("Squeeze", [e.op("Slice", [shape, e.const([i], np.int32), e.const([i + 1], np.int32)]),
                                e.const([0])]) for i in range(3))
    hw = e.op("Mul", [h, w])
    packed = e.op("Concat", [e.unsqueeze(n, [0]), e.unsqueeze(hw, [0]), e.const([d], np.int32)], axis=0)
    x = e.op("Reshape", ["input:0", e.op("Cast", [packed], to=TensorProto.INT64)])
    y = e.op("MatMul", [x, e.weight("dense/kernel", (d, 4))])
    size = e.op("Cast", [e.op("Size", [y])], to=TensorProto.FLOAT)
    y = e.op("Div", [y, e.op("Sqrt", [size])])
    e.nodes.append(helper.make_node("Identity", [y], ["output:0"], name="Identity"))
    return e.model([helper.make_tensor_value_info("input:0", TensorProto.FLOAT, ["unk__1", 3, 5, d])],
                   [helper.make_tensor_value_info("output:0", TensorProto.FLOAT, ["unk__1", 15, 4])],
                   opset=15)


def channel_shuffle(c: int = 8, groups: int = 2, size: int = 6) -> onnx.ModelProto:
    """ShuffleNet's channel shuffle as torch exports it: b, c, h, w read from the shape, c // groups
    as Div of int64s, view(b, groups, c // groups, h, w), transpose(1, 2), view(b, -1, h, w)."""
    e = Exporter(6)
    e.scope = "/stage2/shuffle"
    x = e.op("Conv", ["x", e.weight("conv.weight", (c, c, 1, 1)), e.weight("conv.bias", (c,), 0.1)],
             kernel_shape=[1, 1])
    b, channels, h, w = (e.dim(x, i) for i in range(4))
    per_group = e.op("Div", [channels, e.const(groups)])
    v = e.op("Reshape", [x, e.shape_of(b, groups, per_group, h, w)])
    t = e.op("Transpose", [v], perm=[0, 2, 1, 3, 4])
    y = e.op("Reshape", [t, e.shape_of(b, -1, h, w)])
    e.nodes.append(helper.make_node("Identity", [y], ["y"], name="/Identity"))
    return e.model([helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", c, size, size])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", c, size, size])])
