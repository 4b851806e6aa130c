"""The expected-failure table is well formed: known ops, variants and dtypes, a reason each."""

from __future__ import annotations

from torchneuron.conformance import cases, xfails


def test_xfail_entries_name_real_cases():
    every = {(c.op, c.variant, c.dtype) for k in cases.ops() for c in cases.cases_for(k)}
    for (op, variant, dtype), reason in xfails.XFAILS.items():
        assert reason and reason.strip(), (op, variant, dtype)
        assert op in cases.ops(), f"xfail entry for unknown op {op!r}"
        assert variant == "*" or variant in cases.VARIANTS, (op, variant)
        assert dtype == "*" or dtype in cases.DTYPES, (op, dtype)
        assert any(
            o == op and variant in ("*", v) and dtype in ("*", d) for o, v, d in every
        ), f"xfail entry {(op, variant, dtype)} matches no case"


def test_ihfftn_out_xfail_is_pytorchs_bug():
    """The reason of the ``fft.ihfft*`` out= entries, checked on the CPU alone: under a
    TorchDispatchMode (every op reaches Python, as on a Python-registered backend) PyTorch's
    composite conjugates the unwritten out= tensor. When PyTorch fixes it, this fails: drop the
    xfail entries then."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class Passthrough(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    x = torch.randn(5, 6, 7, generator=torch.Generator().manual_seed(0))
    ref = torch.fft.ihfftn(x, dim=0)
    out = torch.zeros_like(ref)
    with Passthrough():
        torch.fft.ihfftn(x, dim=0, out=out)
    assert not torch.allclose(out, ref)
    assert torch.count_nonzero(out) == 0  # nothing was written into it


def test_linear_cross_entropy_xfail_is_the_auto_policy():
    """The reason of the ``linear_cross_entropy.chunked_none`` bf16 entries: with an explicit
    accumulation policy the device equals the CPU exactly; only PyTorch's per-device 'auto'
    resolution differs."""
    import dataclasses
    import warnings

    import torch
    from torch.testing._internal.common_methods_invocations import op_db

    op = next(o for o in op_db if o.name == "nn.functional.linear_cross_entropy" and o.variant_test_name == "chunked_none")
    s = list(op.sample_inputs("cpu", torch.bfloat16))[1]
    mv = lambda a: a.to("neuron") if isinstance(a, torch.Tensor) else a  # noqa: E731
    for policy in ("accurate", "compact"):
        kw = dict(s.kwargs)
        kw["options"] = dataclasses.replace(kw["options"], acc_policy=policy)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dev = op(mv(s.input), *[mv(a) for a in s.args], **{k: mv(v) for k, v in kw.items()})
        assert torch.equal(dev.cpu(), op(s.input, *s.args, **kw)), policy
