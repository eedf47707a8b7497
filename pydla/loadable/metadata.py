"""The model's metadata a loadable keeps: onnxruntime's ``ModelMetadata`` fields of the ONNX model
it was compiled from, in the run recipe's header under ``"model"``. The compiler writes them there
(:func:`model_header`); :class:`pydla.Session` and ``pydla info`` read them back
(:func:`loadable_metadata`), trusting nothing in the header.

Usage::

    header = model_header(onnx_model)         # {"model": {"producer_name": "pytorch", ...}, "name": ...}
    loadable_metadata(header).producer_name   # "pytorch"
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

UNVERSIONED = 2**63 - 1  # onnxruntime's ModelMetadata.version of a model that has none


@dataclass(frozen=True)
class ModelMetadata:
    """The model's metadata as onnxruntime's ``get_modelmeta()`` returns it (its ModelMetadata's
    fields, with the same values for an ONNX model). A loadable compiled from an ONNX model keeps
    that model's metadata in its recipe header (:func:`model_header`), so that the loadable says the
    same; another loadable says its recipe header's ``name`` (as graph_name) and ``description``.

    Usage: ``sess.get_modelmeta().custom_metadata_map`` -> ``{"author": "me"}``
    """

    producer_name: str = ""
    graph_name: str = ""
    domain: str = ""
    description: str = ""
    graph_description: str = ""
    version: int = UNVERSIONED
    custom_metadata_map: dict[str, str] = field(default_factory=dict)


def onnx_metadata(model: Any) -> ModelMetadata:
    """``model``'s (an onnx.ModelProto) metadata, as onnxruntime reads it."""
    # A model without a version has onnxruntime's "none": the largest int64.
    version = int(model.model_version) if model.HasField("model_version") else UNVERSIONED
    return ModelMetadata(model.producer_name, model.graph.name, model.domain, model.doc_string,
                         model.graph.doc_string, version, {p.key: p.value for p in model.metadata_props})


MODEL_KEY = "model"  # the recipe header's object holding the ONNX model's metadata


def model_header(model: Any) -> dict[str, Any]:
    """What the compiler keeps of ``model``'s (an onnx.ModelProto) metadata in the recipe header:
    the ONNX fields onnxruntime's ModelMetadata reads, and the producer's version. The header's
    ``name`` and ``description`` are the graph's name and the model's doc_string (a run recipe's own
    metadata)."""
    fields: dict[str, Any] = {
        "producer_name": model.producer_name, "producer_version": model.producer_version,
        "graph_name": model.graph.name, "domain": model.domain, "doc_string": model.doc_string,
        "graph_doc_string": model.graph.doc_string,
        "metadata_props": {p.key: p.value for p in model.metadata_props}}
    if model.HasField("model_version"):
        fields["model_version"] = int(model.model_version)
    kept = {k: v for k, v in fields.items() if v not in ("", {})}
    header: dict[str, Any] = {MODEL_KEY: kept} if kept else {}
    if model.graph.name:
        header["name"] = model.graph.name
    if model.doc_string:
        header["description"] = model.doc_string
    return header


def loadable_metadata(header: Any) -> ModelMetadata:
    """What a loadable's recipe header says of its model: the ONNX model's metadata it was compiled
    from (:func:`model_header`), else the recipe's ``name`` and ``description``. The header is the
    loadable's, not trusted: a field of another type is left out, never raised on."""
    header = header if isinstance(header, dict) else {}
    text = {k: v for k, v in header.items() if isinstance(v, str)}
    model = header.get(MODEL_KEY)
    if not isinstance(model, dict):
        return ModelMetadata(graph_name=text.get("name", ""), description=text.get("description", ""))

    def field_text(key: str) -> str:
        value = model.get(key, "")
        return value if isinstance(value, str) else ""

    version = model.get("model_version")
    props = model.get("metadata_props")
    return ModelMetadata(
        producer_name=field_text("producer_name"), graph_name=field_text("graph_name"),
        domain=field_text("domain"), description=field_text("doc_string"),
        graph_description=field_text("graph_doc_string"),
        version=version if type(version) is int and -2**63 <= version < 2**63 else UNVERSIONED,
        custom_metadata_map={k: v for k, v in props.items() if isinstance(k, str) and isinstance(v, str)}
        if isinstance(props, dict) else {})
