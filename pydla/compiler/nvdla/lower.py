"""The INT8 back end's layers (:mod:`pydla.compiler.nvdla.layers`) as an NVDLA program
(:mod:`pydla.compiler.nvdla.plan`): convolutions (a ReLU or Clip after one fused into its SDP) with
their requantization, fully connected layers as convolutions over the whole input, max and average
pooling and global average pooling on the PDP, Add on the SDP (one input per element), Concat by
writing its inputs into one buffer at their channel offsets, Flatten/Reshape as the same buffer.

Usage::

    plan = lower(network, facts)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pydla.compiler.nvdla import requant
from pydla.compiler.nvdla.layers import Layer, Network, Quant, Weights
from pydla.compiler.nvdla.layout import Facts
from pydla.compiler.nvdla.lower_conv import MAX_KERNEL
from pydla.compiler.nvdla.plan import Buffer, PdpOp, Plan, Ref, SdpOp, SoftmaxOp, Stage
from pydla.errors import DlaError, NvError

QMIN = -128


@dataclass
class _Tensor:
    ref: Ref
    shape: tuple[int, int, int]
    quant: Quant


class _Lowering:
    def __init__(self, net: Network, facts: Facts) -> None:
        self.net, self.facts = net, facts
        self.plan = Plan()
        self.t: dict[str, _Tensor] = {}
        self.consumers: dict[str, list[Layer]] = {}
        for layer in net.layers:
            for i in layer.inputs:
                self.consumers.setdefault(i, []).append(layer)
        self.fused: set[int] = set()
        self.homes: dict[str, Ref] = {}  # concat inputs written into the concat's buffer
        self.count = 0

    def quant(self, name: str) -> Quant:
        q = self.net.quant.get(name)
        if q is None:
            raise DlaError(
                NvError.BadValue,
                f"tensor '{name}' has no quantization (no calibration entry, or no QuantizeLinear after it)",
            )
        return q

    def buffer(self, name: str, shape: tuple[int, int, int], quant: Quant) -> Ref:
        home = self.homes.get(name)
        if home is not None:
            return home
        if name in self.plan.buffers:
            return Ref(name)
        role = "output" if name in self.net.outputs else "scratch"
        bind = self.net.outputs.index(name) if role == "output" else 0
        self.plan.add_buffer(Buffer(name, shape, role, quant[0], quant[1], bind))
        return Ref(name)

    def run(self) -> Plan:
        for bind, (name, dims) in enumerate(self.net.inputs):
            if len(dims) != 4 or dims[0] != 1:
                raise DlaError(
                    NvError.NotSupported, f"input '{name}': shape {list(dims)} (N=1, C, H, W only)"
                )
            q = self.quant(name)
            shape = (dims[1], dims[2], dims[3])
            self.plan.add_buffer(Buffer(name, shape, "input", q[0], q[1], bind))
            self.t[name] = _Tensor(Ref(name), shape, q)
        self._plan_concats()
        for i, layer in enumerate(self.net.layers):
            if i not in self.fused:
                self._layer(i, layer)
        for name in self.net.outputs:
            if name not in self.t:
                raise DlaError(NvError.NotSupported, f"output '{name}' is not computed by the INT8 back end")
        return self.plan

    def _plan_concats(self) -> None:
        """Concat inputs that an operation computes for the Concat alone are written straight into
        its buffer (at a channel offset that starts a surface)."""
        producers = {layer.output: layer for layer in self.net.layers}
        for layer in self.net.layers:
            shapes = [self.net.shapes.get(name) for name in (*layer.inputs, layer.output)]
            if layer.op != "concat" or any(s is None or len(s) != 4 for s in shapes):
                continue
            out = shapes[-1]
            assert out is not None
            q = self.quant(layer.output)
            self.buffer(layer.output, (out[1], out[2], out[3]), q)
            c0 = 0
            for name, shape in zip(layer.inputs, shapes, strict=False):
                assert shape is not None
                producer = producers.get(name)
                if (
                    producer is not None
                    and producer.op in ("conv", "add", "relu", "clip")
                    and len(self.consumers.get(name, [])) == 1
                    and c0 % self.facts.atom == 0
                    and name not in self.net.outputs
                    and self._same_rounding(name, q)
                ):
                    self.homes[name] = Ref(layer.output, c0, shape[1])
                    self.net.quant[name] = q
                c0 += shape[1]

    # -- layers ------------------------------------------------------------------------------------

    def _next(self, i: int, output: str) -> tuple[Layer | None, int]:
        users = self.consumers.get(output, [])
        if i < 0:
            return None, -1
        if len(users) != 1 or output in self.net.outputs:
            return None, -1
        j = self.net.layers.index(users[0])
        return users[0], j

    def _layer(self, i: int, layer: Layer) -> None:
        op = layer.op
        x = self.t.get(layer.inputs[0])
        if x is None:
            raise DlaError(
                NvError.BadValue, f"layer '{layer.name}': input '{layer.inputs[0]}' is not computed"
            )
        if op == "conv":
            self._conv(i, layer, x)
        elif op in ("maxpool", "avgpool", "gap"):
            self._pool(layer, x)
        elif op == "add":
            self._add(i, layer, x)
        elif op == "concat":
            self._concat(layer)
        elif op in ("relu", "clip"):
            self._relu(layer, x)
        elif op == "reshape":
            self.t[layer.output] = x
        elif op == "softmax":
            self._softmax(layer, x)
        else:
            raise DlaError(NvError.NotSupported, f"layer '{layer.name}': {op}")

    def _activation(self, i: int, layer: Layer) -> tuple[str, bool]:
        """The tensor a layer's requantized output is (its ReLU/Clip's when one follows alone)."""
        nxt, j = self._next(i, layer.output)
        if (
            nxt is not None
            and nxt.op in ("relu", "clip")
            and self._clip_free(nxt)
            and self._same_rounding(layer.output, self.quant(nxt.output))
        ):
            self.fused.add(j)
            return nxt.output, True
        return layer.output, False

    def _same_rounding(self, name: str, q: Quant) -> bool:
        """Whether computing ``name`` straight in quantization ``q`` is what the model computes: a
        quantized model rounds (and saturates) every tensor it quantizes, a calibrated one only what
        the back end chooses to."""
        own = self.net.quant.get(name)
        return self.net.kind == "calibrated" or own is None or own == q

    def _clip_free(self, layer: Layer) -> bool:
        """A Clip(0, hi) is a ReLU when its output's INT8 range ends at or below hi."""
        if layer.op == "relu":
            return True
        lo, hi = layer.attrs.get("min"), layer.attrs.get("max")
        if lo is None or lo != 0.0:
            return False
        if hi is None:
            return True
        s, z = self.quant(layer.output)
        return bool(s * (127 - z) <= hi * (1 + 1e-6) + s / 2)

    def _relu(self, layer: Layer, x: _Tensor) -> None:
        if not self._clip_free(layer):
            raise DlaError(
                NvError.NotSupported,
                f"layer '{layer.name}': Clip{layer.attrs} beyond its output's "
                "INT8 range (only Clip(0, hi) with hi at or above it)",
            )
        q = self.quant(layer.output)
        dst = self.buffer(layer.output, x.shape, q)
        self._requantize(x, q, dst, relu=True, name=layer.name)
        self.t[layer.output] = _Tensor(dst, x.shape, q)

    def _requantize(self, x: _Tensor, q: Quant, dst: Ref, relu: bool, name: str) -> None:
        """An SDP copying ``x`` into ``dst`` with quantization ``q`` (and ReLU)."""
        if relu and x.quant == q:
            stage, cvt = requant.relu_stage(q[1])
        else:
            stage, cvt = requant.rescale_stage(x.quant[0] / q[0], x.quant[1], q[1])
            if relu:
                stage = Stage(stage.alu, stage.mul, stage.truncate, relu=True)
        self.plan.ops.append(SdpOp(x.ref, dst, x1=stage, cvt=cvt, name=name))

    def _conv(self, i: int, layer: Layer, x: _Tensor) -> None:
        from pydla.compiler.nvdla.lower_conv import conv_ops

        out_name, relu = self._activation(i, layer)
        q = self.quant(out_name)
        ops, shape = conv_ops(layer, x.ref, x.shape, x.quant, q, relu, self.facts.atom)
        dst = self.buffer(out_name, shape, q)
        for op, c0, channels in ops:
            op.sdp.dst = dst if len(ops) == 1 else Ref(dst.buffer, dst.c0 + c0, channels)
            self.plan.ops.append(op)
        self.t[out_name] = _Tensor(dst, shape, q)
        if out_name != layer.output:
            self.t[layer.output] = self.t[out_name]

    def _pool(self, layer: Layer, x: _Tensor) -> None:
        c, h, w = x.shape
        a = layer.attrs
        if layer.op == "gap" and max(h, w) <= MAX_KERNEL:
            self._gap_conv(layer, x)
            return
        if layer.op == "gap":
            kernel, stride, pads = (w, h), (1, 1), (0, 0, 0, 0)
        else:
            kh, kw = a["kernel"]
            kernel, stride, pads = (kw, kh), (a["strides"][1], a["strides"][0]), a["pads"]
            if layer.op == "avgpool" and any(pads) and not a["count_include_pad"]:
                raise DlaError(
                    NvError.NotSupported,
                    f"layer '{layer.name}': AveragePool with pads and count_include_pad 0",
                )
        if max(kernel) > 8 or max(stride) > 8:
            raise DlaError(
                NvError.NotSupported,
                f"layer '{layer.name}': a {kernel[0]}x{kernel[1]} pooling "
                "window (NVDLA's PDP pools at most 8x8)",
            )
        left, right, top, bottom = pads
        oh, ow = (
            (h + top + bottom - kernel[1]) // stride[1] + 1,
            (w + left + right - kernel[0]) // stride[0] + 1,
        )
        shape = (c, oh, ow)
        want = self.net.quant.get(layer.output, x.quant)
        if self.net.kind == "calibrated":
            want = x.quant
            self.net.quant[layer.output] = want
        same = want == x.quant
        dst = self.buffer(layer.output, shape, x.quant) if same else self._scratch(shape, x.quant)
        mode = "max" if layer.op == "maxpool" else "avg"
        self.plan.ops.append(PdpOp(x.ref, dst, mode, kernel, stride, pads, x.quant[1], layer.name))
        pooled = _Tensor(dst, shape, x.quant)
        if not same:
            final = self.buffer(layer.output, shape, want)
            self._requantize(pooled, want, final, relu=False, name=layer.name)
            pooled = _Tensor(final, shape, want)
        self.t[layer.output] = pooled

    def _gap_conv(self, layer: Layer, x: _Tensor) -> None:
        """Global average pooling as a depthwise convolution of ones: exact sums, one rounding (the
        PDP's average rounds twice, with 16-bit reciprocals, and its result keeps the input's scale)."""
        c, h, w = x.shape
        q = self.net.quant.get(layer.output, x.quant)
        self.net.quant[layer.output] = q
        weights = Weights(np.ones((c, 1, h, w), np.int8), np.full(c, 1.0 / (h * w)))
        attrs = {"kernel": (h, w), "strides": (1, 1), "dilations": (1, 1), "pads": (0, 0, 0, 0), "group": c}
        self._conv(-1, Layer("conv", [layer.inputs[0]], layer.output, attrs, weights, layer.name), x)

    def _softmax(self, layer: Layer, x: _Tensor) -> None:
        """A Softmax over channels of a (C, 1, 1) tensor ending the network: an EMU1 task (NVIDIA's
        runtime emulator), whose INT8 output is the probability times 127 (zero point 0)."""
        if (
            x.shape[1:] != (1, 1)
            or layer.attrs["axis"] not in (1, -1)
            or layer.output not in self.net.outputs
        ):
            raise DlaError(
                NvError.NotSupported,
                f"layer '{layer.name}': a Softmax that is not over the channels "
                "of a vector the network ends with (NVIDIA's emulator computes "
                "that one)",
            )
        q = (1.0 / 127.0, 0)
        self.net.quant[layer.output] = q
        dst = self.buffer(layer.output, x.shape, q)
        # a zero point shifts every score alike: the softmax does not see it
        self.plan.ops.append(SoftmaxOp(x.ref, dst, x.quant[0], q[0], layer.name))
        self.t[layer.output] = _Tensor(dst, x.shape, q)

    def _scratch(self, shape: tuple[int, int, int], q: Quant) -> Ref:
        self.count += 1
        name = f"_tmp{self.count}"
        self.plan.add_buffer(Buffer(name, shape, "scratch", q[0], q[1]))
        return Ref(name)

    def _add(self, i: int, layer: Layer, a: _Tensor) -> None:
        b = self.t.get(layer.inputs[1])
        if b is None:
            raise DlaError(
                NvError.BadValue, f"layer '{layer.name}': input '{layer.inputs[1]}' is not computed"
            )
        if a.shape != b.shape:
            raise DlaError(
                NvError.NotSupported,
                f"layer '{layer.name}': Add of {a.shape} and {b.shape} (broadcasting is not compiled)",
            )
        out_name, relu = self._activation(i, layer)
        q = self.quant(out_name)
        src, x1, x2, cvt = requant.add_stages(
            a.ref, b.ref, a.quant[0] / q[0], a.quant[1], b.quant[0] / q[0], b.quant[1], q[1]
        )
        dst = self.buffer(out_name, a.shape, q)
        if relu and q[1] != QMIN:  # the ReLU comes after the zero point: one more SDP pass
            tmp = self._scratch(a.shape, q)
            self.plan.ops.append(SdpOp(src, tmp, x1=x1, x2=x2, cvt=cvt, name=layer.name))
            self._requantize(_Tensor(tmp, a.shape, q), q, dst, relu=True, name=layer.name)
        else:
            self.plan.ops.append(SdpOp(src, dst, x1=x1, x2=x2, cvt=cvt, name=layer.name))
        self.t[out_name] = _Tensor(dst, a.shape, q)
        if out_name != layer.output:
            self.t[layer.output] = self.t[out_name]

    def _concat(self, layer: Layer) -> None:
        parts = [self.t[name] for name in layer.inputs]
        _, h, w = parts[0].shape
        total = sum(p.shape[0] for p in parts)
        q = self.quant(layer.output)
        dst = self.buffer(layer.output, (total, h, w), q)
        c0 = 0
        for name, p in zip(layer.inputs, parts, strict=True):
            if p.shape[1:] != (h, w):
                raise DlaError(NvError.BadValue, f"layer '{layer.name}': inputs of different sizes")
            want = Ref(dst.buffer, dst.c0 + c0, p.shape[0])
            if p.ref != want:
                if (dst.c0 + c0) % self.facts.atom:
                    raise DlaError(
                        NvError.NotSupported,
                        f"layer '{layer.name}': input '{name}' at channel {c0}, "
                        f"not a multiple of {self.facts.atom} (NVDLA's "
                        "surfaces)",
                    )
                self._requantize(p, q, want, relu=False, name=layer.name)
            c0 += p.shape[0]
        self.t[layer.output] = _Tensor(dst, (total, h, w), q)


def lower(net: Network, facts: Facts) -> Plan:
    """The NVDLA program of ``net`` (see the module)."""
    lowering = _Lowering(net, facts)
    plan = lowering.run()
    plan.notes["kind"] = net.kind
    return plan
