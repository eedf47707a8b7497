"""``pydla info`` and ``pydla validate`` on NVIDIA's formats: an NVDLA Loadable or a DlaImage (.dimg).

Files are recognised by content (:func:`file_kind`), never by name. ``info`` describes every list of
a loadable (tasks with each DLA task's operations: block, precision, dims, dependency edges; memory,
addresses, events, blobs, tensors, relocations, submit list) or an image's metadata; ``validate``
reads the loadable with every check (tables, cross-references, each DLA task's firmware descriptors).

Usage::

    kind = file_kind(path)                  # "nvdla-loadable", "dimg" or None
    info(path, kind, as_json=False)         # prints; returns the exit code
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydla.errors import file_error
from pydla.loadable.nvdla import model as M
from pydla.loadable.nvdla.descriptors import DlaNetwork, Operation, decode_dla_task
from pydla.loadable.nvdla.dimg import MAGIC, DlaImage, read_dimg
from pydla.loadable.nvdla.quantization import tensor_quantization
from pydla.loadable.nvdla.reader import looks_like_nvdla_loadable, read_nvdla_loadable

NVDLA_LOADABLE = "nvdla-loadable"
DIMG = "dimg"


def file_kind(path: Path) -> str | None:
    """``nvdla-loadable`` or ``dimg`` when the file's first bytes say so, else None (also when it
    cannot be read: the caller's own reader reports that)."""
    try:
        with path.open("rb") as f:
            head = f.read(64)
    except OSError:
        return None
    if head[:4] == MAGIC:
        return DIMG
    return NVDLA_LOADABLE if looks_like_nvdla_loadable(head) else None


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        raise file_error(path, e) from e


def _cube(cube: Any) -> str:
    if cube.type == 2:  # dla_mem_e.HW: on the fly
        return f"{cube.width}x{cube.height}x{cube.channel} (on the fly)"
    return f"{cube.width}x{cube.height}x{cube.channel} @{cube.address}" + (
        f"+{cube.offset}" if getattr(cube, "offset", 0) else "")


def _operation(op: Operation) -> dict[str, Any]:
    s = op.surface_desc
    if op.block.name == "BDMA":
        shape = f"{s.num_transfers} transfer(s)" + "".join(
            f", {s.transfers[i].line_size}B x {s.transfers[i].line_repeat} lines x "
            f"{s.transfers[i].surface_repeat} "
            f"@{s.transfers[i].source_address}->@{s.transfers[i].destination_address}"
            for i in range(min(s.num_transfers, 20)))
    else:
        shape = f"{_cube(s.src_data)} -> {_cube(s.dst_data)}"
        if op.block.name == "CONV":
            shape += f", weights {_cube(s.weight_data)}"
    return {"index": op.index, "block": op.block.name, "precision": op.precision, "dims": shape,
            "dependency_count": int(op.common.dependency_count),
            "consumers": [{"index": e.index, "event": e.event.name} for e in op.consumers],
            "fused_parent": None if op.fused_parent is None else op.fused_parent.index}


def _network(net: DlaNetwork) -> dict[str, Any]:
    return {"firmware_interface": str(net.interface_version),
            "operations": [_operation(o) for o in net.operations],
            "luts": len(net.luts), "heads": net.heads(), "num_addresses": int(net.network.num_addresses)}


def _flags(flags: M.MemoryFlags) -> str:
    return "|".join(f.name for f in M.MemoryFlags if f and flags & f and f.name) or "NONE"


def describe(lo: M.NvdlaLoadable) -> dict[str, Any]:
    """The loadable as plain data (what ``pydla info --json`` prints); DLA tasks with their decoded
    descriptors (a DlaError when they break a rule)."""
    tasks = []
    for t in lo.task_list:
        entry: dict[str, Any] = {"id": t.id, "interface": t.interface.name, "instance": t.instance,
                                 "address_list": list(t.address_list), "pre_actions": list(t.pre_actions),
                                 "post_actions": list(t.post_actions)}
        if t.interface == M.Interface.DLA1:
            entry["network"] = _network(decode_dla_task(lo, t))
        tasks.append(entry)
    return {
        "format": "NVDLA Loadable", "version": str(lo.version), "tasks": tasks,
        "memory": [{"id": m.id, "domain": m.domain.name, "flags": _flags(m.flags), "size": m.size,
                    "alignment": m.alignment, "contents": [[c, o] for c, o in zip(m.contents, m.offsets,
                                                                                  strict=True)],
                    **({"bind_id": m.bind_id, "tensor_desc_id": m.tensor_desc_id} if m.bindable else {})}
                   for m in lo.memory_list],
        "addresses": [{"id": a.id, "mem_id": a.mem_id, "offset": a.offset,
                       "size": a.size} for a in lo.address_list],
        "events": [{"id": e.id, "op": e.op.name, "type": e.type.name, "target": e.target, "val": e.val}
                   for e in lo.event_list],
        "blobs": [{"name": b.name, "size": b.size, "interface": b.interface.name,
                   "sub_interface": b.sub_interface,
                   "version": str(b.version)} for b in lo.blobs],
        "tensors": [{"id": t.id, "name": t.name, "mem_id": t.mem_id, "offset": t.offset, "size": t.size,
                     "nchw": [t.n, t.c, t.h,
                              t.w], "data_format": t.data_format.name, "data_type": t.data_type.name,
                     "data_category": t.data_category.name, "pixel_format": t.pixel_format.name,
                     "pixel_mapping": t.pixel_mapping.name, "strides": list(t.strides)}
                    for t in lo.tensor_desc_list],
        "relocations": [{"address_id": r.address_id, "write_id": r.write_id, "offset": r.offset,
                         "interface": r.interface.name, "sub_interface": r.sub_interface,
                         "reloc_type": r.reloc_type} for r in lo.reloc_list],
        "submit_list": [list(s.task_id) for s in lo.submit_list],
        "quantization": tensor_quantization(lo),
    }


def _print_loadable(path: Path, size: int, d: dict[str, Any]) -> None:
    print(f"{path}: NVDLA Loadable {d['version']} ({size} bytes): {len(d['tasks'])} task(s), "
          f"{len(d['memory'])} "
          f"memory entries, {len(d['addresses'])} addresses, {len(d['events'])} events, {len(d['blobs'])} "
          f"blobs, "
          f"{len(d['tensors'])} tensors, {len(d['relocations'])} relocations")
    print("submit list: " + ", then "
                            "".join("{" + ", ".join(f"task {t}" for t in s) + "}" for s in d["submit_list"]))
    for t in d["tasks"]:
        print(f"task {t['id']}: {t['interface']} (instance {t['instance']}), address list "
              f"{t['address_list']}, "
              f"waits for events {t['pre_actions']}, signals {t['post_actions']}")
        net = t.get("network")
        if net is None:
            continue
        heads = ", ".join(f"{b} {i}" for b, i in net["heads"].items())
        print(f"  firmware interface {net['firmware_interface']}: {len(net['operations'])} operation(s), "
              f"{net['luts']} LUT(s); first of each block: {heads or 'none'}")
        for op in net["operations"]:
            edges = ", ".join(f"{c['index']} on {c['event']}" for c in op["consumers"]) or "none"
            fused = "" if op["fused_parent"] is None else f"; fused to {op['fused_parent']}"
            print(f"  op {op['index']} {op['block']:<5} {op['precision']:<12} {op['dims']}; waits for "
                  f"{op['dependency_count']} event(s); signals {edges}{fused}")
    print("memory:")
    for m in d["memory"]:
        bound = f" bind_id {m['bind_id']} tensor {m['tensor_desc_id']}" if "bind_id" in m else ""
        contents = ", ".join(f"{c!r}@{o}" for c, o in m["contents"])
        print(f"  {m['id']:>3} {m['domain']:<6} {m['flags']:<14} {m['size']:>10} bytes align {m['alignment']}"
              f"{bound}{'  ' + contents if contents else ''}")
    print("addresses: " + ", ".join(f"{a['id']}=mem {a['mem_id']}+{a['offset']}"
                                    + (f" ({a['size']} B)" if a["size"] else "") for a in d["addresses"]))
    print("events: " + (", ".join(f"{e['id']} {e['op']} {e['val']} on "
                                  f"{e['target']}" for e in d["events"]) or "none"))
    print("blobs:")
    for b in d["blobs"]:
        print(f"  {b['name']!r}: {b['size']} bytes, {b['interface']} sub {b['sub_interface']} version "
              f"{b['version']}")
    print("tensors:")
    for t in d["tensors"]:
        print(f"  {t['id']} {t['name']!r}: NCHW {t['nchw']} {t['data_type']} {t['data_format']} "
              f"{t['pixel_format']} "
              f"{t['data_category']}, {t['size']} bytes in memory {t['mem_id']}+{t['offset']}, strides "
              f"{t['strides']}")
    if d.get("quantization"):
        print("quantization (real = scale * (q - zero point)):")
        for name, q in d["quantization"].items():
            print(f"  {name}: {str(q.get('type', 'int8')).upper()} {tuple([1, *q.get('shape', [])])} "
                  f"scale {q['scale']:.6g} zero point {q['zero_point']} ({q.get('role', '')})")
    if d["relocations"]:
        print("relocations:")
        for r in d["relocations"]:
            print(f"  address {r['address_id']} -> memory {r['write_id']}+{r['offset']} (type "
                  f"{r['reloc_type']}, "
                  f"{r['interface']} sub {r['sub_interface']})")


def _image_info(img: DlaImage) -> dict[str, Any]:
    return {"format": "DlaImage", "pixel_format": img.format.name, "legacy_numbering": img.legacy_numbering,
            "width": img.width, "height": img.height, "channel": img.channel, "line_stride": img.line_stride,
            "surface_stride": img.surface_stride, "size": img.size, "element": str(img.dtype),
            "data_bytes": len(img.data)}


def info(path: Path, kind: str, *, as_json: bool = False) -> int:
    """``pydla info`` on an NVDLA Loadable or a .dimg: print what it holds; 0."""
    data = _read(path)
    if kind == DIMG:
        d = _image_info(read_dimg(data, str(path)))
        if as_json:
            print(json.dumps(d, indent=2))
            return 0
        numbering = " (numbered as NVIDIA's earlier runtime wrote it)" if d["legacy_numbering"] else ""
        print(f"{path}: DlaImage {d['pixel_format']}{numbering}: {d['width']}x{d['height']}x{d['channel']} "
              f"{d['element']} elements ({d['data_bytes']} bytes), line stride {d['line_stride']}, surface "
              f"stride "
              f"{d['surface_stride']}, surface {d['size']} bytes")
        return 0
    lo = read_nvdla_loadable(data)
    d = describe(lo)
    if as_json:
        print(json.dumps(d, indent=2))
    else:
        _print_loadable(path, len(data), d)
    return 0


def validate(path: Path, kind: str) -> int:
    """``pydla validate``: every check; prints 'valid' (0) or raises the DlaError of the first problem."""
    data = _read(path)
    if kind == DIMG:
        img = read_dimg(data, str(path))
        print(f"{path}: valid DlaImage ({img.format.name}, {img.width}x{img.height}x{img.channel})")
        return 0
    lo = read_nvdla_loadable(data)
    ops = sum(len(decode_dla_task(lo, t).operations) for t in lo.task_list if t.interface == M.Interface.DLA1)
    print(f"{path}: valid NVDLA Loadable {lo.version} ({len(lo.task_list)} tasks, {ops} DLA operations, "
          f"{len(lo.memory_list)} memory entries, {len(lo.blobs)} blobs)")
    return 0
