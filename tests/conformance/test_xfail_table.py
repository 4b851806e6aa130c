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
