"""The MiniLM graph with its word-embedding table turned back into floats row by row.

The shipped int8 model stores every weight as int8 plus a float scale and restores it to
float32 inside the graph (``Cast``, then ``Mul``). onnxruntime folds those constant
subgraphs when it builds a session, so every weight then sits in memory as float32: ~98 MiB
for a 23 MB file. The weights that feed matrix products must be float32 there anyway, but
the word-embedding table (30,522 rows x 384, ~47 MB as float32) is only ever read a few
dozen rows per text. ``rows_first`` moves that table's ``Gather`` in front of its ``Cast``
and ``Mul``: the table stays int8 (~12 MB) and only the looked-up rows and their scales are
restored. Every output element is the same float32 product of the same two numbers; the
session is ~33 MiB smaller and costs the same CPU per text.

The rewrite also names two inner layers' states as outputs (``LAYER_OUTPUTS``): asking for
them costs a copy of their buffers, not another pass (9.08 against 9.16 ms for a 40-word
post, measured). onnxruntime then fuses no kernel across them, which moves the vectors by
float rounding only (under 1e-6 per element).

The rewrite needs the ``onnx`` package (~0.25 s to import, parse and write), so its result
is kept in the cache directory, next to the cached ad vectors, under the shipped file's
digest: later starts read it without importing ``onnx``. Writing it removes the same
model's rewrite under the names earlier versions of this module gave it (``EARLIER``).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

# The cached rewrite's file name after "minilm-{digest[:16]}", and the names earlier versions
# gave it (a rewrite without the inner layers' outputs, ~22 MB, read by no version now).
SUFFIX = "-rows-first-layers.onnx"
EARLIER = ("-rows-first.onnx",)
TABLE = "inner.embeddings.word_embeddings.weight_q"  # the int8 word-embedding table
# Inner layers' states the rewrite also makes graph outputs (brand safety pools them): the
# outputs of the third and the fifth of the six layers, by their names in the shipped graph.
LAYER_OUTPUTS = ("layer_norm_6", "layer_norm_10")


def rows_first(model: bytes) -> bytes | None:
    """``model`` with the word-embedding lookup done on the int8 table, or None when the
    graph does not have the shipped shape (``Gather(Mul(Cast(TABLE), scale), ids)``)."""
    import onnx
    from onnx import TensorProto, helper

    proto = onnx.load_from_string(model)
    nodes = list(proto.graph.node)
    cast = next((n for n in nodes if n.op_type == "Cast" and list(n.input) == [TABLE]), None)
    if cast is None:
        return None
    mul = next((n for n in nodes if n.op_type == "Mul" and n.input[0] == cast.output[0]), None)
    if mul is None:
        return None
    gather = next((n for n in nodes if n.op_type == "Gather" and n.input[0] == mul.output[0]), None)
    uses = [n for n in nodes if cast.output[0] in n.input or mul.output[0] in n.input]
    if gather is None or len(uses) != 2 or any(a.i != 0 for a in gather.attribute):
        return None
    scale, ids, out = mul.input[1], gather.input[1], gather.output[0]
    rows = [
        helper.make_node("Gather", [TABLE, ids], [out + "/rows_q"], axis=0),
        helper.make_node("Cast", [out + "/rows_q"], [out + "/rows_f"], to=TensorProto.FLOAT),
        helper.make_node("Gather", [scale, ids], [out + "/rows_scale"], axis=0),
        helper.make_node("Mul", [out + "/rows_f", out + "/rows_scale"], [out]),
    ]
    rebuilt: list[onnx.NodeProto] = []
    for node in nodes:
        if node is not cast and node is not mul:
            rebuilt.extend(rows if node is gather else [node])
    del proto.graph.node[:]
    proto.graph.node.extend(rebuilt)
    made = {o for n in rebuilt for o in n.output}
    for name in LAYER_OUTPUTS:
        if name in made:
            proto.graph.output.append(
                helper.make_tensor_value_info(name, TensorProto.FLOAT, ["batch", "tokens", 384])
            )
    onnx.checker.check_model(proto)
    result: bytes = proto.SerializeToString()
    return result


def session_source(path: Path, digest: str, cache_dir: Path | None) -> str | bytes:
    """What onnxruntime should load for the model at ``path`` (sha256 ``digest``): the
    cached rewrite when there is one, else a fresh rewrite (saved to ``cache_dir`` when
    given), else the file itself (a graph of another shape)."""
    cached = cache_dir / f"minilm-{digest[:16]}{SUFFIX}" if cache_dir else None
    if cached is not None and cached.is_file():
        return str(cached)
    rewritten = rows_first(path.read_bytes())
    if rewritten is None:
        return str(path)
    if cached is not None and _write_atomically(cached, rewritten):
        for suffix in EARLIER:
            (cached.parent / f"minilm-{digest[:16]}{suffix}").unlink(missing_ok=True)
        # From the file rather than the bytes: a session built from a buffer stays ~35 MiB
        # larger (measured), which would undo the saving on the first start.
        return str(cached)
    return rewritten


def _write_atomically(target: Path, data: bytes) -> bool:
    """Write ``data`` to ``target`` through a temporary file and a rename, so a reader never
    sees half a file. False when the directory is not writable: the rewrite is then done
    again at each start."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=target.name, suffix=".tmp")
    except OSError:
        return False
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, target)
    except OSError:
        Path(tmp).unlink(missing_ok=True)
        return False
    return True
