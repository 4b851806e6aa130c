"""state_dict, torch.save / torch.load with map_location in both directions, bit exact."""

from __future__ import annotations

import io

import torch


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.BatchNorm1d(7), torch.nn.Linear(7, 2))


def _roundtrip(obj, **load_kw):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, **load_kw)


def test_device_to_cpu_and_back_bit_exact():
    m = _model().to("neuron")
    m.train()
    m(torch.randn(4, 5, device="neuron"))  # moves BN running stats
    sd = m.state_dict()
    on_cpu = _roundtrip(sd, map_location="cpu")
    for k, v in sd.items():
        assert on_cpu[k].device.type == "cpu"
        assert torch.equal(on_cpu[k], v.cpu()), k
    on_dev = _roundtrip(sd)  # default: restored to where it was saved
    for k, v in sd.items():
        assert on_dev[k].device.type == "neuron" and torch.equal(on_dev[k].cpu(), v.cpu()), k
    cpu_sd = {k: v.cpu() for k, v in sd.items()}
    to_dev = _roundtrip(cpu_sd, map_location="neuron")
    for k, v in cpu_sd.items():
        assert to_dev[k].device.type == "neuron" and torch.equal(to_dev[k].cpu(), v), k
    fresh = _model().to("neuron")
    fresh.load_state_dict(to_dev)
    for (k, a), (_, b) in zip(fresh.state_dict().items(), sd.items(), strict=True):
        assert torch.equal(a.cpu(), b.cpu()), k


def test_views_and_shared_storage_survive_save():
    base = torch.arange(10.0, device="neuron")
    view = base[2:5]
    loaded = _roundtrip({"base": base, "view": view})
    assert loaded["view"].untyped_storage().data_ptr() == loaded["base"].untyped_storage().data_ptr()
    loaded["view"].fill_(-1)
    assert loaded["base"].cpu()[2:5].tolist() == [-1.0, -1.0, -1.0]


def test_optimizer_state_round_trip():
    m = _model().to("neuron")
    opt = torch.optim.AdamW(m.parameters())
    m(torch.randn(4, 5, device="neuron")).sum().backward()
    opt.step()
    state = _roundtrip(opt.state_dict(), map_location="neuron")
    opt2 = torch.optim.AdamW(m.parameters())
    opt2.load_state_dict(state)
    for s1, s2 in zip(opt.state.values(), opt2.state.values(), strict=True):
        for k in s1:
            assert torch.equal(s1[k].cpu(), s2[k].cpu())


def test_pickle_and_legacy_format_read_device_bytes_without_counting_them(no_garbage):
    # both go through PyTorch's C++ ``writeFileRaw``, which wraps the device pointer in a storage
    # of its own (``at::from_blob``) that torchneuron did not allocate (runtime/storage.py)
    import pickle

    base = torch.arange(32.0, device="neuron")
    before = torch.neuron.memory_allocated()
    copies = [pickle.loads(pickle.dumps({"base": base, "view": base[4:10]}))]
    buf = io.BytesIO()
    torch.save({"base": base, "view": base[4:10]}, buf, _use_new_zipfile_serialization=False)
    buf.seek(0)
    copies.append(torch.load(buf))
    for loaded in copies:
        assert loaded["base"].device.type == "neuron" and torch.equal(loaded["base"].cpu(), base.cpu())
        assert torch.equal(loaded["view"].cpu(), base.cpu()[4:10])
    # as on the CPU: plain pickle copies each storage, the legacy format keeps them shared
    legacy = copies[1]
    assert legacy["view"].untyped_storage().data_ptr() == legacy["base"].untyped_storage().data_ptr()
    # the two loaded copies hold memory; the saving did not leave any behind
    del copies, loaded, legacy
    assert torch.neuron.memory_allocated() == before
