"""Per-operator facts derived once from an ATen schema (cached per ``OpOverload``)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

# Operators whose output shape depends on tensor *values*: the host must see the data, so they
# are synchronisation points (pending device errors surface there).
DATA_DEPENDENT = frozenset(
    {
        "aten::nonzero", "aten::nonzero_static", "aten::masked_select", "aten::unique",
        "aten::_unique", "aten::_unique2", "aten::unique_dim", "aten::unique_consecutive",
        "aten::unique_dim_consecutive", "aten::repeat_interleave", "aten::_local_scalar_dense",
        "aten::argwhere", "aten::is_nonzero", "aten::equal", "aten::allclose", "aten::bincount",
        "aten::_assert_async", "aten::item",
    }
)

# In-place operators that change a tensor's *metadata* (sizes, strides, storage).
METADATA_MUTATING = frozenset(
    {
        "aten::resize_", "aten::resize_as_", "aten::set_", "aten::as_strided_", "aten::squeeze_",
        "aten::unsqueeze_", "aten::transpose_", "aten::t_", "aten::swapdims_", "aten::swapaxes_",
        "aten::detach_", "aten::_resize_output_",
    }
)


# Random operators (besides those tagged ``nondeterministic_seeded``, e.g. attention with
# dropout). Those without a ``generator`` argument draw from the CPU default generator in their
# host kernel, so the device generator is swapped in around them.
RANDOM = frozenset(
    {
        "aten::rand", "aten::randn", "aten::randint", "aten::randperm", "aten::rand_like",
        "aten::randn_like", "aten::randint_like", "aten::normal", "aten::normal_",
        "aten::bernoulli", "aten::bernoulli_", "aten::poisson", "aten::multinomial",
        "aten::native_dropout", "aten::dropout", "aten::binomial", "aten::_standard_gamma",
        "aten::exponential_", "aten::geometric_", "aten::log_normal_", "aten::cauchy_",
        "aten::random_", "aten::uniform_", "aten::rrelu_with_noise", "aten::_fused_dropout",
        "aten::_sample_dirichlet", "aten::rrelu", "aten::fused_moving_avg_obs_fake_quant",
    }
)


@dataclass(frozen=True)
class OpFacts:
    name: str  # "aten::add"
    overload: str  # "Tensor"
    written: tuple[int | str, ...]  # positions / names of arguments the op writes
    generator_pos: int | None  # position of a Generator argument
    generator_name: str | None
    sync_point: bool
    metadata_mutating: bool
    inplace_or_out: bool
    num_positional: int
    random_without_generator: bool
    returns_alias: bool  # some result aliases an input (a view)
    returns_self_or_none: bool  # returns nothing, or exactly the written argument 0

    @property
    def plain_inplace(self) -> bool:
        """Writes only into ``self`` (argument 0), never resizes it, returns it (or nothing)."""
        return (
            self.written == (0,) and self.overload != "out" and not self.generator_name
            and not self.sync_point and not self.metadata_mutating
            and not self.random_without_generator and self.returns_self_or_none
        )

    @property
    def plain_functional(self) -> bool:
        """Reads its inputs, returns fresh tensors: the generic kernel's fast path applies."""
        return not (
            self.written or self.returns_alias or self.generator_name or self.sync_point
            or self.metadata_mutating or self.random_without_generator
        )

    @property
    def qualified(self) -> str:
        return self.name if self.overload in ("", "default") else f"{self.name}.{self.overload}"


_cache: dict[object, OpFacts] = {}


def _returns_self_or_none(schema) -> bool:
    rets = schema.returns
    if not rets:
        return True
    if len(rets) != 1 or not schema.arguments:
        return False
    r, a0 = rets[0], schema.arguments[0]
    return (
        r.alias_info is not None and a0.alias_info is not None and r.alias_info.is_write
        and set(r.alias_info.before_set) == set(a0.alias_info.before_set)
    )


def facts(op: torch._ops.OpOverload) -> OpFacts:
    f = _cache.get(op)
    if f is not None:
        return f
    schema = op._schema
    written: list[int | str] = []
    gen_pos = None
    gen_name = None
    num_pos = 0
    for i, a in enumerate(schema.arguments):
        if not a.kwarg_only:
            num_pos += 1
        ai = a.alias_info
        if ai is not None and ai.is_write:
            written.append(a.name if a.kwarg_only else i)
        if str(a.type) in ("Generator?", "Optional[Generator]"):
            gen_pos = None if a.kwarg_only else i
            gen_name = a.name
    name = schema.name
    f = OpFacts(
        name=name,
        overload=schema.overload_name or "default",
        written=tuple(written),
        generator_pos=gen_pos,
        generator_name=gen_name,
        sync_point=name in DATA_DEPENDENT,
        metadata_mutating=name in METADATA_MUTATING,
        inplace_or_out=bool(written),
        num_positional=num_pos,
        random_without_generator=(name in RANDOM or torch.Tag.nondeterministic_seeded in op.tags)
        and gen_name is None,
        returns_alias=any(r.alias_info is not None for r in schema.returns),
        returns_self_or_none=_returns_self_or_none(schema),
    )
    _cache[op] = f
    return f
