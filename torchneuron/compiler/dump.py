"""``TORCHNEURON_DUMP_DIR``: per graph, the FX graph, the placement, and per compiled region
its FX graph, StableHLO (with source locations), executable and compile log."""

from __future__ import annotations

from pathlib import Path

import torch.fx as fx

from . import settings


class GraphDump:
    def __init__(self, graph_id: str, kind: str):
        root = settings.dump_dir()
        self.dir: Path | None = None
        if root is not None:
            model = settings.model_name()
            if model is not None:
                root = root / settings.model_dir_name(model)
            self.dir = root / f"{graph_id}_{kind}"
            self.dir.mkdir(parents=True, exist_ok=True)

    @classmethod
    def off(cls) -> GraphDump:
        """A dump that writes nothing (compilations that are not the graph's own)."""
        dump = cls.__new__(cls)
        dump.dir = None
        return dump

    @property
    def enabled(self) -> bool:
        return self.dir is not None

    def write(self, name: str, data: str | bytes) -> None:
        if self.dir is None:
            return
        path = self.dir / name
        if isinstance(data, bytes):
            path.write_bytes(data)
        else:
            path.write_text(data)

    def graph(self, name: str, gm: fx.GraphModule) -> None:
        if self.dir is not None:
            self.write(name, gm.print_readable(print_output=False, include_stride=True, include_device=True))

    def __str__(self) -> str:
        return str(self.dir) if self.dir else ""
