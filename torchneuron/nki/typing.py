"""``nki.typing`` (``nt``): annotations for kernel tensor parameters.

``nt.tensor[128, 512]``, ``nt.tensor[(128, 512), nl.bfloat16]`` and ``nt.mutable_tensor`` are
accepted as annotations; the simulator does not enforce them.
"""

from __future__ import annotations

from typing import Any

from .tiles import NkiTensor


class _TensorType:
    def __init__(self, name: str, spec: Any = None) -> None:
        self._name = name
        self.spec = spec

    def __getitem__(self, spec: Any) -> _TensorType:
        return _TensorType(self._name, spec)

    def __repr__(self) -> str:
        return f"nt.{self._name}" + (f"[{self.spec}]" if self.spec is not None else "")

    def __instancecheck__(self, obj: Any) -> bool:
        return isinstance(obj, NkiTensor)


tensor = _TensorType("tensor")
mutable_tensor = _TensorType("mutable_tensor")
scalar = _TensorType("scalar")
