"""Lowered regions remembered across processes, so that a warm start skips torch-mlir.

The executable cache is keyed by the StableHLO text, so even a warm start had to lower every
region with torch-mlir (in a forked child) to find its key: about a second per training graph
of the GPT-2-style LM. This level maps what the lowering depends on to the StableHLO it
produced:

* the region's FX code (operators, arguments, structure),
* every input's shape, stride, storage offset and dtype,
* the values of constant tensors the region reads (``get_attr`` nodes),
* every node's source location (the StableHLO with locations names the user's lines),
* ``verdicts.fingerprint()``: torch-mlir's and PyTorch's versions and the compiler's sources.

Entries live in ``TORCHNEURON_CACHE_DIR/lowered/`` with the executable cache's format and
guarantees (checksum, atomic replace, per-key lock; a corrupt entry is reported and lowered
again). A lowering error is never remembered.
"""

from __future__ import annotations

import hashlib
import json
import operator

import torch
import torch.fx as fx

from . import verdicts
from .cache import ExecutableCache
from .lowering import Lowered, lower

LOWERED = ExecutableCache(subdir="lowered", suffix=".stablehlo")

# Regions up to this many operators are lowered in this process, larger ones in a forked child
# (lowering.py: torch-mlir's pathologies — a 20 GB blow-up, a crash — were seen on large
# transformer backward graphs; every node of a region passed the partitioner's isolated probes).
# Forking a 2 GB process costs ~0.15 s more than the lowering of a small region itself (0.20
# against 0.05 s, measured), which a CNN with library convolutions pays for each of its hundreds
# of regions.
ISOLATE_ABOVE_NODES = 40


def _tensor_signature(t: torch.Tensor) -> str:
    return f"{t.dtype}{tuple(t.shape)}{t.stride()}+{t.storage_offset()}"


def region_key(gm: fx.GraphModule) -> str:
    h = hashlib.sha256()
    h.update(verdicts.fingerprint().encode())
    h.update(gm.code.encode())
    for node in gm.graph.nodes:
        h.update(node.name.encode())
        if node.op == "placeholder":
            val = node.meta.get("val")
            h.update((_tensor_signature(val) if isinstance(val, torch.Tensor) else repr(val)).encode())
        elif node.op == "get_attr":
            value = operator.attrgetter(node.target)(gm)
            if isinstance(value, torch.Tensor):
                host = value.detach().to("cpu").contiguous()
                h.update(_tensor_signature(value).encode())
                h.update(host.reshape(-1).view(torch.uint8).numpy().tobytes())
            else:
                h.update(repr(value).encode())
        h.update((node.meta.get("stack_trace") or "").encode())
        h.update(b"\x00")
    return h.hexdigest()


def lower_region(gm: fx.GraphModule, name: str = "main") -> tuple[Lowered, str]:
    """``lower(gm)`` (isolated in a child process if the region is large), or its remembered
    result; also says which ("memory", "disk" or "compiled" = lowered now)."""
    key = region_key(gm)

    def lower_now() -> bytes:
        ops = sum(1 for n in gm.graph.nodes if n.op == "call_function")
        lowered = lower(gm, name, isolate=ops > ISOLATE_ABOVE_NODES)
        return json.dumps({"text": lowered.text, "with_locations": lowered.text_with_locations}).encode()

    lookup = LOWERED.get_or_compile(key, lower_now, {"kind": "stablehlo", "region": name})
    data = json.loads(lookup.payload)
    return Lowered(data["text"], data["with_locations"]), lookup.source
