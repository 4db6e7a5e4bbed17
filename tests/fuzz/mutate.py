"""Mutations of real ONNX models: what a stranger's file can look like.

Each mutator takes a seeded ``random.Random`` and either a ``ModelProto`` (edited in
place) or the serialized bytes, and returns a short description of what it did, so a
failing case can be reproduced and read from its id alone. Byte-level mutators model
damaged downloads; proto-level ones model broken or hostile exporters.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import onnx
from onnx import AttributeProto, TensorProto, helper

HUGE = (2**31, 2**40, 2**62, 2**63 - 1)
ABSURD_INTS = (-(2**63), -(2**31), -1, 0, 2**31 - 1, 2**40, 2**63 - 1)
ELEM_TYPES = [v for k, v in TensorProto.DataType.items()] + [0, 99, 4096]


def _all_nodes(model: onnx.ModelProto) -> list[tuple[onnx.GraphProto, onnx.NodeProto]]:
    from trtconv.onnxutil.walk import iter_graphs

    return [(g, n) for g in iter_graphs(model.graph) for n in g.node]


def _all_graphs(model: onnx.ModelProto) -> list[onnx.GraphProto]:
    from trtconv.onnxutil.walk import iter_graphs

    return list(iter_graphs(model.graph))


def _value_infos(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    out: list[onnx.ValueInfoProto] = []
    for g in _all_graphs(model):
        out.extend(g.input)
        out.extend(g.output)
        out.extend(g.value_info)
    return out


def _tensors(model: onnx.ModelProto) -> list[onnx.TensorProto]:
    from trtconv.load import iter_tensors

    return list(iter_tensors(model))


# --- byte level -------------------------------------------------------------------------

def truncate(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    cut = rng.choice([rng.randrange(1, max(2, len(data))), rng.randrange(1, 64), len(data) - rng.randrange(1, 64)])
    cut = max(0, min(cut, len(data) - 1))
    return data[:cut], f"truncate@{cut}"


def bitflip(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    buf = bytearray(data)
    n = rng.choice([1, 2, 8, 32])
    # Most of a real model is weights; aim half the flips at the first 4 KiB of structure.
    for _ in range(n):
        i = rng.randrange(min(len(buf), 4096)) if rng.random() < 0.5 else rng.randrange(len(buf))
        buf[i] ^= 1 << rng.randrange(8)
    return bytes(buf), f"bitflip*{n}"


def splice(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    buf = bytearray(data)
    start = rng.randrange(len(buf))
    size = rng.choice([1, 4, 16, 256])
    fill = rng.choice([b"\x00", b"\xff", bytes([rng.randrange(256)])])
    buf[start : start + size] = fill * min(size, len(buf) - start)
    return bytes(buf), f"splice@{start}+{size}"


BYTE_MUTATORS: dict[str, Callable[[bytes, random.Random], tuple[bytes, str]]] = {
    "truncate": truncate,
    "bitflip": bitflip,
    "splice": splice,
}


# --- proto level ------------------------------------------------------------------------

def wrong_dtype(m: onnx.ModelProto, rng: random.Random) -> str:
    if rng.random() < 0.5 and _tensors(m):
        t = rng.choice(_tensors(m))
        t.data_type = rng.choice(ELEM_TYPES)
        return f"tensor {t.name!r} dtype={t.data_type}"
    vi = rng.choice(_value_infos(m))
    vi.type.tensor_type.elem_type = rng.choice(ELEM_TYPES)
    return f"value {vi.name!r} dtype={vi.type.tensor_type.elem_type}"


def bad_dims(m: onnx.ModelProto, rng: random.Random) -> str:
    value = rng.choice([-1, -7, 0, *HUGE])
    if rng.random() < 0.6:
        vis = [v for v in _value_infos(m) if v.type.tensor_type.shape.dim] or _value_infos(m)
        vi = rng.choice(vis)
        dims = vi.type.tensor_type.shape.dim
        d = rng.choice(dims) if len(dims) else dims.add()
        d.dim_value = value
        return f"value {vi.name!r} dim={value}"
    tensors = [t for t in _tensors(m) if t.dims] or _tensors(m)
    if not tensors:
        return "bad_dims: no tensor"
    t = rng.choice(tensors)
    if t.dims:
        t.dims[rng.randrange(len(t.dims))] = value
    else:
        t.dims.append(value)
    return f"tensor {t.name!r} dim={value}"


def dangling_input(m: onnx.ModelProto, rng: random.Random) -> str:
    g, n = rng.choice([(g, n) for g, n in _all_nodes(m) if n.input] or _all_nodes(m))
    if not n.input:
        n.input.append("ghost")
    i = rng.randrange(len(n.input))
    n.input[i] = f"ghost_{rng.randrange(1000)}"
    return f"node {n.name or n.op_type!r} input[{i}] dangling"


def cycle(m: onnx.ModelProto, rng: random.Random) -> str:
    nodes = list(m.graph.node)
    if len(nodes) < 2:
        n = nodes[0]
        n.input.append(n.output[0])
        return "self-loop"
    i = rng.randrange(len(nodes) - 1)
    j = rng.randrange(i + 1, len(nodes))
    a, b = m.graph.node[i], m.graph.node[j]
    if a.input and b.output:
        a.input[rng.randrange(len(a.input))] = b.output[0]
    if rng.random() < 0.5:  # sometimes sort the nodes so the cycle is not just an ordering bug
        m.graph.node[i].CopyFrom(b)
        m.graph.node[j].CopyFrom(a)
    return f"cycle {i}<-{j}"


def duplicate_names(m: onnx.ModelProto, rng: random.Random) -> str:
    kind = rng.choice(["output", "node", "input", "initializer"])
    g = m.graph
    if kind == "output" and len(g.node) >= 2:
        a, b = rng.sample(range(len(g.node)), 2)
        g.node[b].output[0] = g.node[a].output[0]
        return f"duplicate output {g.node[a].output[0]!r}"
    if kind == "node" and g.node:
        g.node.append(g.node[rng.randrange(len(g.node))])
        return "duplicate node"
    if kind == "initializer" and g.initializer:
        g.initializer.append(g.initializer[rng.randrange(len(g.initializer))])
        return "duplicate initializer"
    if g.input:
        g.input.append(g.input[rng.randrange(len(g.input))])
    return "duplicate input"


def missing_initializer(m: onnx.ModelProto, rng: random.Random) -> str:
    g = m.graph
    consts = [i for i, n in enumerate(g.node) if n.op_type == "Constant"]
    if g.initializer and (rng.random() < 0.7 or not consts):
        i = rng.randrange(len(g.initializer))
        name = g.initializer[i].name
        del g.initializer[i]
        return f"initializer {name!r} removed"
    if consts:
        i = rng.choice(consts)
        name = g.node[i].output[0]
        del g.node[i]
        return f"constant {name!r} removed"
    return "no initializer"


def absurd_attribute(m: onnx.ModelProto, rng: random.Random) -> str:
    nodes = [n for _, n in _all_nodes(m) if n.attribute]
    compute = [n for n in nodes if n.op_type != "Constant"]
    if compute and rng.random() < 0.7:  # most PP-OCR nodes are Constants; aim at the rest
        nodes = compute
    if not nodes:
        return "no attribute"
    n = rng.choice(nodes)
    a = rng.choice(list(n.attribute))
    choice = rng.randrange(6)
    if choice == 0 or a.type == AttributeProto.INT:
        a.type = AttributeProto.INT
        a.i = rng.choice(ABSURD_INTS)
    elif choice == 1 or a.type == AttributeProto.INTS:
        a.type = AttributeProto.INTS
        del a.ints[:]
        a.ints.extend(rng.choice(ABSURD_INTS) for _ in range(rng.choice([0, 1, 3, 9])))
    elif choice == 2 or a.type == AttributeProto.FLOAT:
        a.type = AttributeProto.FLOAT
        a.f = rng.choice([float("nan"), float("inf"), -1e38, 0.0])
    elif choice == 3:
        a.type = AttributeProto.STRING
        a.s = bytes(rng.randrange(256) for _ in range(rng.choice([0, 8, 300])))
    elif choice == 4:
        # a type without its value (protobuf itself refuses enum values it does not know)
        a.type = rng.choice([0, AttributeProto.GRAPH, AttributeProto.TENSOR, AttributeProto.SPARSE_TENSOR])
    else:
        a.name = rng.choice(["", "no_such_attribute", a.name * 3])
    return f"node {n.name or n.op_type!r} attr {a.name!r} -> type {a.type}"


def nested_subgraphs(m: onnx.ModelProto, rng: random.Random) -> str:
    """Wrap a node in ``depth`` nested If nodes (protobuf parsers cap nesting near 30 levels)."""
    depth = rng.choice([2, 8, 20, 40])
    g = m.graph
    if not g.node:
        return "no node"
    idx = rng.randrange(len(g.node))
    inner = onnx.NodeProto()
    inner.CopyFrom(g.node[idx])
    g.initializer.append(helper.make_tensor("fuzz_cond", TensorProto.BOOL, [], [True]))
    outs = [helper.make_tensor_value_info(o, 0, None) for o in inner.output]
    leaf = onnx.GraphProto(name="leaf", node=[inner], output=outs)
    # Built top-down in place: upb refuses to copy a message nested this deep.
    cur = g.node[idx]
    cur.Clear()
    for level in range(depth):
        cur.op_type, cur.name = "If", f"nest{level}"
        cur.input.append("fuzz_cond")
        cur.output.extend(inner.output)
        then = cur.attribute.add(name="then_branch", type=AttributeProto.GRAPH)
        then.g.name = f"b{level}"
        then.g.output.extend(outs)
        # Only one branch nests: two would double the model per level.
        cur.attribute.add(name="else_branch", type=AttributeProto.GRAPH).g.CopyFrom(leaf)
        cur = then.g.node.add()
    cur.CopyFrom(inner)
    return f"node {idx} nested {depth} deep"


def wrong_op(m: onnx.ModelProto, rng: random.Random) -> str:
    _, n = rng.choice(_all_nodes(m))
    new = rng.choice(["", "NoSuchOp", "Conv", "Loop", "If", "Reshape", "DCNv2", "MMCVModulatedDeformConv2d",
                      "DeformConv", "Resize", "TopK", "NonZero"])
    n.op_type = new
    if rng.random() < 0.3:
        n.domain = rng.choice(["", "com.microsoft", "mmdeploy", "custom.evil"])
    return f"node op -> {new!r}/{n.domain!r}"


def bad_opset(m: onnx.ModelProto, rng: random.Random) -> str:
    choice = rng.randrange(4)
    if choice == 0:
        del m.opset_import[:]
        return "no opset"
    if choice == 1 and m.opset_import:
        m.opset_import[0].version = rng.choice([0, 1, 6, 99, 2**40])
        return f"opset={m.opset_import[0].version}"
    if choice == 2:
        m.ir_version = rng.choice([0, 1, 3, 99, 2**40])
        return f"ir_version={m.ir_version}"
    m.opset_import.add(domain="", version=7)
    return "two default opsets"


def broken_io(m: onnx.ModelProto, rng: random.Random) -> str:
    g = m.graph
    choice = rng.randrange(5)
    if choice == 0:
        del g.output[:]
        return "no outputs"
    if choice == 1 and g.input:
        g.input[0].ClearField("type")
        return "input without type"
    if choice == 2:
        g.output[0].name = f"ghost_out_{rng.randrange(100)}"
        return "output produced by nobody"
    if choice == 3:
        del g.node[rng.randrange(len(g.node)) :]
        return "graph cut short"
    if g.input:
        g.input[0].name = ""
    return "empty input name"


def raw_data_mismatch(m: onnx.ModelProto, rng: random.Random) -> str:
    tensors = [t for t in _tensors(m) if t.raw_data]
    if not tensors:
        return "no raw tensor"
    t = rng.choice(tensors)
    keep = rng.choice([0, 1, 3, len(t.raw_data) // 2, len(t.raw_data) + 5])
    t.raw_data = (t.raw_data + b"\x00" * 8)[:keep]
    return f"tensor {t.name!r} raw_data {keep} bytes"


def external_data(m: onnx.ModelProto, rng: random.Random) -> str:
    """Declare a tensor external with a hostile location, offset or length."""
    tensors = _tensors(m)
    if not tensors:
        return "no tensor"
    t = rng.choice(tensors)
    location = rng.choice(["../escape.bin", "/etc/passwd", "sub/../../x", "weights.bin", "", "missing.bin",
                           "C:\\win.bin", "weights.bin\x00.txt"])
    offset = rng.choice(["0", "-5", str(2**62), "abc", "1e3", ""])
    length = rng.choice(["", "16", str(2**62), "-1", str(2**64), "0x10"])
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    del t.external_data[:]
    for key, value in (("location", location), ("offset", offset), ("length", length)):
        if value or rng.random() < 0.5:
            e = t.external_data.add()
            e.key, e.value = key, value
    return f"tensor {t.name!r} external {location!r} off={offset!r} len={length!r}"


def shape_bomb(m: onnx.ModelProto, rng: random.Random) -> str:
    """A tiny node whose output is huge: ConstantOfShape/Expand/Tile/Range declared in a few bytes."""
    side = rng.choice([2**16, 2**20, 2**31])
    g = m.graph
    g.node.append(helper.make_node("Constant", [], ["bomb_shape"], value=helper.make_tensor(
        "bomb_shape_value", TensorProto.INT64, [2], [side, side])))
    op = rng.choice(["ConstantOfShape", "Expand", "Range"])
    if op == "ConstantOfShape":
        g.node.append(helper.make_node("ConstantOfShape", ["bomb_shape"], ["bomb"]))
    elif op == "Expand":
        g.node.append(helper.make_node("Constant", [], ["bomb_one"], value=helper.make_tensor(
            "bomb_one_value", TensorProto.FLOAT, [1], [1.0])))
        g.node.append(helper.make_node("Expand", ["bomb_one", "bomb_shape"], ["bomb"]))
    else:
        for name, v in (("bomb_start", 0), ("bomb_limit", side * side), ("bomb_delta", 1)):
            g.node.append(helper.make_node("Constant", [], [name], value=helper.make_tensor(
                name + "_value", TensorProto.INT64, [], [v])))
        g.node.append(helper.make_node("Range", ["bomb_start", "bomb_limit", "bomb_delta"], ["bomb"]))
    g.output.append(helper.make_tensor_value_info("bomb", 0, None))
    return f"{op} output {side}x{side}"


PROTO_MUTATORS: dict[str, Callable[[onnx.ModelProto, random.Random], str]] = {
    "wrong_dtype": wrong_dtype,
    "bad_dims": bad_dims,
    "dangling_input": dangling_input,
    "cycle": cycle,
    "duplicate_names": duplicate_names,
    "missing_initializer": missing_initializer,
    "absurd_attribute": absurd_attribute,
    "nested_subgraphs": nested_subgraphs,
    "wrong_op": wrong_op,
    "bad_opset": bad_opset,
    "broken_io": broken_io,
    "raw_data_mismatch": raw_data_mismatch,
    "external_data": external_data,
    "shape_bomb": shape_bomb,
}
ALL_KINDS = tuple(BYTE_MUTATORS) + tuple(PROTO_MUTATORS)


@dataclass(frozen=True)
class Mutant:
    seed_model: str
    kind: str
    description: str
    data: bytes


def mutate(seed_name: str, seed_bytes: bytes, kind: str, case_seed: int) -> Mutant:
    """One reproducible mutant: ``(seed model, kind, case_seed)`` determines it fully."""
    rng = random.Random(f"{seed_name}/{kind}/{case_seed}")
    if kind == "none":  # the control: the real model as it is
        return Mutant(seed_name, kind, "unmutated", seed_bytes)
    if kind in BYTE_MUTATORS:
        data, desc = BYTE_MUTATORS[kind](seed_bytes, rng)
        return Mutant(seed_name, kind, desc, data)
    model = onnx.load_from_string(seed_bytes)
    descs = [_apply(PROTO_MUTATORS[kind], model, rng)]
    # One in four cases stacks a second proto mutation: bugs hide in combinations.
    if rng.random() < 0.25:
        extra = rng.choice(list(PROTO_MUTATORS))
        descs.append(f"{extra}: " + _apply(PROTO_MUTATORS[extra], model, rng))
    return Mutant(seed_name, kind, "; ".join(descs), model.SerializeToString())


def _apply(mutator, model: onnx.ModelProto, rng: random.Random) -> str:
    """Run a mutator; one that protobuf itself refuses (nesting past its depth limit while
    copying) leaves the model as the mutator left it and says so."""
    from google.protobuf.message import DecodeError

    try:
        return mutator(model, rng)
    except DecodeError as exc:
        return f"{mutator.__name__} stopped by protobuf: {str(exc)[:60]}"


def write_mutant(mutant: Mutant, folder: Path) -> Path:
    """The mutant as ``model.onnx`` in ``folder``, with a small ``weights.bin`` beside it
    so external-data mutations can point at a file that exists."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "weights.bin").write_bytes(bytes(range(256)) * 4)
    path = folder / "model.onnx"
    path.write_bytes(mutant.data)
    return path


# --- calibration data -------------------------------------------------------------------

DATA_KINDS = ("data_bytes", "data_array")


def mutate_samples(folder: Path, kind: str, case_seed: int) -> str:
    """Damage one sample file in ``folder``: its bytes (header included) or its array."""
    import numpy as np

    rng = random.Random(f"data/{kind}/{case_seed}")
    files = sorted(p for p in folder.iterdir() if p.suffix in (".npy", ".npz"))
    victim = rng.choice(files)
    if kind == "data_bytes":
        data = victim.read_bytes()
        how = rng.choice(list(BYTE_MUTATORS))
        if how == "bitflip" and rng.random() < 0.7:  # the header is where parsers break
            head = bytearray(data[:128])
            for _ in range(rng.choice([1, 3])):
                i = rng.randrange(len(head))
                head[i] ^= 1 << rng.randrange(8)
            victim.write_bytes(bytes(head) + data[128:])
            return f"{victim.name}: header bitflip"
        new, desc = BYTE_MUTATORS[how](data, rng)
        victim.write_bytes(new)
        return f"{victim.name}: {desc}"
    if victim.suffix == ".npz":
        with np.load(victim, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        name = rng.choice(sorted(arrays))
    else:
        arrays, name = {"": np.load(victim, allow_pickle=False)}, ""
    arr = arrays[name]
    choice = rng.choice(["nan", "inf", "shape", "dtype", "scalar", "empty", "object", "huge"])
    if choice in ("nan", "inf") and arr.dtype.kind == "f" and arr.size:
        arr = arr.copy()
        arr.flat[rng.randrange(arr.size)] = np.nan if choice == "nan" else np.inf
    elif choice == "shape":
        arr = arr.reshape(-1)[: max(1, arr.size // 2)]
    elif choice == "dtype":
        arr = arr.astype(rng.choice([np.float64, np.int8, np.bool_, np.complex64, np.uint64]))
    elif choice == "scalar":
        arr = np.asarray(arr.reshape(-1)[0] if arr.size else 0)
    elif choice == "empty":
        arr = np.zeros((0,) + arr.shape[1:], arr.dtype)
    elif choice == "object":
        arr = np.array([{"pickled": 1}], dtype=object)
    else:  # a header declaring far more than the file holds
        out = __import__("io").BytesIO()
        np.lib.format.write_array_header_1_0(
            out, {"descr": "<f4", "fortran_order": False, "shape": (2**40, *arr.shape[1:])})
        victim.write_bytes(out.getvalue() + b"\0" * 64)
        return f"{victim.name}: header declares 2**40 rows"
    if victim.suffix == ".npz":
        arrays[name] = arr
        np.savez(victim, **arrays)
    else:
        np.save(victim, arr, allow_pickle=True)
    return f"{victim.name}[{name}]: {choice}"
