// The device's eager kernels for plain operators, in C++: the fast path of the simulated NeuronCore.
//
// A `neuron` tensor's bytes are host memory, so an operator runs on the device by running the
// CPU kernel on *host aliases* (CPU tensors over the same bytes) and adopting the fresh results
// as device memory. torchneuron.ops.generic does exactly that in Python; this module does it for
// the plain operators (functional ones that return fresh tensors, in-place ones that write only
// into their first argument) without entering Python, which is where an eager step spent most of
// its host time (a 64x64 `add` took ~30 us through Python, ~2 us on the CPU).
//
// One boxed kernel (FastKernel) serves every registered operator on PrivateUse1:
//
//   1. if the fast path is disabled (adaptive eager is recording, a profiler listens, ...) or an
//      argument is anything but a device tensor of a native dtype, a CPU tensor or a plain value,
//      the call goes to the operator's Python kernel, which torchneuron registers under
//      PrivateUse2 for exactly this purpose (a redispatch, so the arguments are untouched);
//   2. device tensors become host aliases (tensors sharing a device storage share one host
//      storage), and the CPU kernel runs on them (a redispatch to the CPU key);
//   3. results are mapped back: an alias that was passed in -> that device tensor (in-place ops
//      return self); a result over an input's bytes -> a device tensor over the input's storage;
//      anything else is fresh host memory, adopted as a device allocation whose deleter returns
//      it to the host allocator and to the accounts below.
//
// The view operators torchneuron answers with their Meta kernels (view, as_strided, transpose_
// ...: new geometry over the same storage, no bytes touched) are served here too, by a
// redispatch to Meta.
//
// Anything unusual goes to the Python kernel, which reproduces the full contract: an exception
// from the CPU kernel (the Python kernel runs the operator again and defers the error to the next
// synchronisation point with its context; the operators here are functional or fail before they
// write), a result of an emulated dtype (float64/int64 computed as 32-bit, with a warning), a
// result that would exceed the device's capacity (the Python allocator empties its cache first
// and raises torch.OutOfMemoryError with the figures).
//
// The accounts are each core's memory statistics (allocated, reserved, peaks, counts): the
// Python caching allocator and this module update the same numbers, so memory_allocated() stays
// exact whichever path produced a tensor.
//
// Deliberately no pybind11 code and no torch/extension.h, to keep the first-use build short (the
// one torch/csrc header with pybind11 in it, python_variable.h, for the tensor objects of the
// compiled programs' boundary below, adds ~4 s: 30.6 -> 34.5 s on a 2-core host).

#include <Python.h>

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/Storage.h>
#include <c10/core/StorageImpl.h>
#include <c10/core/TensorImpl.h>
#include <c10/util/SmallVector.h>
#include <torch/csrc/Storage.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/library.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace {

constexpr auto kDevice = c10::DeviceType::PrivateUse1;

// ---- memory accounts ------------------------------------------------------------------------------
struct Accounts {
  std::mutex mutex;
  int64_t allocated = 0;
  int64_t reserved = 0;
  int64_t peak_allocated = 0;
  int64_t peak_reserved = 0;
  int64_t num_allocs = 0;
  int64_t num_frees = 0;
  int64_t active = 0;
  int64_t capacity = std::numeric_limits<int64_t>::max();

  void alloc_locked(int64_t nbytes, int64_t rounded, bool from_cache) {
    allocated += nbytes;
    if (!from_cache) {
      reserved += rounded;
    }
    num_allocs += 1;
    active += 1;
    peak_allocated = std::max(peak_allocated, allocated);
    peak_reserved = std::max(peak_reserved, reserved);
  }
  void free_locked(int64_t nbytes, int64_t rounded, bool to_cache) {
    allocated -= nbytes;
    if (!to_cache) {
      reserved -= rounded;
    }
    num_frees += 1;
    active -= 1;
  }
  // an adoption that fits the capacity without touching the Python cache; false otherwise
  bool try_adopt(int64_t nbytes, int64_t rounded) {
    std::lock_guard<std::mutex> lock(mutex);
    if (reserved + rounded > capacity) {
      return false;
    }
    alloc_locked(nbytes, rounded, false);
    return true;
  }
};

// one set of accounts per logical core (the native device guard allows at most 64 cores)
constexpr int kMaxCores = 64;

Accounts& accounts(int core) {
  static auto* a = new Accounts[kMaxCores];  // leaked: storages may die during static destruction
  return a[core];
}

// the Python allocator's granularity (torchneuron.runtime.memory.round_size)
constexpr int64_t kGranule = 512;
constexpr int64_t kLarge = 1 << 20;
constexpr int64_t kSegment = 2 << 20;

int64_t round_size(int64_t nbytes) {
  if (nbytes < kLarge) {
    return std::max(kGranule, (nbytes + kGranule - 1) / kGranule * kGranule);
  }
  return (nbytes + kSegment - 1) / kSegment * kSegment;
}

// the host storage a device storage adopted from a kernel's result, and its accounting
struct Adopted {
  c10::Storage host;
  int64_t nbytes;
  int64_t rounded;
  int core;
};

void adopted_delete(void* ctx) {
  auto* a = static_cast<Adopted*>(ctx);
  {
    auto& acc = accounts(a->core);
    std::lock_guard<std::mutex> lock(acc.mutex);
    acc.free_locked(a->nbytes, a->rounded, false);
  }
  delete a;  // drops the host storage: the bytes go back to the host allocator
}

// the host storage `hs` (a kernel's result) as a device storage of `core` that owns it, accounted
// as a new allocation; an empty Storage if it does not fit the core's capacity (the Python
// allocator then empties its cache first, or raises torch.OutOfMemoryError with the figures)
c10::Storage adopt_storage(const c10::Storage& hs, int core) {
  c10::StorageImpl* hsi = hs.unsafeGetStorageImpl();
  const int64_t nbytes = static_cast<int64_t>(hsi->nbytes());
  const int64_t rounded = round_size(nbytes);
  if (!accounts(core).try_adopt(nbytes, rounded)) {
    return c10::Storage();
  }
  void* data = const_cast<void*>(hsi->data_ptr().get());
  auto* ctx = new Adopted{hs, nbytes, rounded, core};
  return c10::Storage(c10::Storage::use_byte_size_t(), static_cast<size_t>(nbytes),
                      c10::DataPtr(data, ctx, &adopted_delete, c10::Device(kDevice, static_cast<c10::DeviceIndex>(core))),
                      nullptr, false);
}

// a device tensor over `ds` with the dtype and geometry of the host tensor `like`
at::Tensor device_tensor(c10::Storage ds, const at::Tensor& like) {
  auto impl = c10::make_intrusive<c10::TensorImpl>(std::move(ds), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                                   like.dtype());
  impl->set_sizes_and_strides(like.sizes(), like.strides(), like.storage_offset());
  return at::Tensor(std::move(impl));
}

// ---- dtypes ---------------------------------------------------------------------------------------
bool exact_dtypes() {
  const char* v = std::getenv("TORCHNEURON_EXACT_DTYPES");
  return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0 && std::strcmp(v, "false") != 0 &&
      std::strcmp(v, "False") != 0;
}

// dtypes the NeuronCore computes natively. float64 / int64 results are computed as 32-bit values
// (the Python kernel narrows them and warns) unless TORCHNEURON_EXACT_DTYPES=1; an int64 input
// is read as it is (indices), a float64 input is rounded to float32 first (Python again).
bool native_dtype(c10::ScalarType s, bool input = false) {
  switch (s) {
    case c10::ScalarType::Float:
    case c10::ScalarType::BFloat16:
    case c10::ScalarType::Half:
    case c10::ScalarType::Char:
    case c10::ScalarType::Short:
    case c10::ScalarType::Int:
    case c10::ScalarType::Byte:
    case c10::ScalarType::Bool:
    case c10::ScalarType::Float8_e4m3fn:
    case c10::ScalarType::Float8_e5m2:
      return true;
    case c10::ScalarType::Long:
      return input || exact_dtypes();
    case c10::ScalarType::Double:
      return exact_dtypes();
    default:
      return false;
  }
}

// whether `t`'s elements lie inside its storage's bytes (PyTorch's own bounds check for a view)
bool within_storage(const at::Tensor& t, const c10::StorageImpl* st) {
  int64_t last = t.storage_offset();
  const auto sizes = t.sizes();
  const auto strides = t.strides();
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == 0) {
      return true;
    }
    last += (sizes[i] - 1) * strides[i];
  }
  const int64_t need = (last + 1) * static_cast<int64_t>(t.itemsize());
  return st->data_ptr().get() != nullptr && need <= static_cast<int64_t>(st->nbytes());
}

// ---- one call -------------------------------------------------------------------------------------
struct Call {
  // host alias -> the device tensor it stands for. The aliases are held here: the kernel
  // consumes its arguments, and an in-place kernel that returns nothing (the foreach ops) leaves
  // no other reference to them, while sync_geometry() still reads them afterwards
  c10::SmallVector<std::pair<at::Tensor, at::Tensor>, 6> aliases;
  // device storage -> its host storage, and back (inputs sharing bytes share one host storage)
  c10::SmallVector<std::pair<c10::StorageImpl*, c10::Storage>, 6> host_of;
  c10::SmallVector<std::pair<c10::StorageImpl*, c10::Storage>, 6> device_of;
  int core = -1;  // the logical core of the device tensors (results go there too)

  // `d` as the CPU kernel should see it; false if the call must take the Python path
  bool to_host(const at::Tensor& d, at::Tensor* out) {
    if (!d.defined() || d.device().type() != kDevice) {
      *out = d;
      // a host tensor beside device tensors is taken as a number when it is 0-d (as on CUDA);
      // any other tensor of another device: the Python kernel raises PyTorch's device error
      return !d.defined() || (d.device().type() == c10::kCPU && d.dim() == 0);
    }
    const int index = d.device().index();
    if (core < 0) {
      core = index;
    } else if (index != core) {
      return false;  // tensors on two cores: the Python kernel raises PyTorch's device error
    }
    if (d.layout() != c10::kStrided || !d.has_storage() || !native_dtype(d.scalar_type(), true) ||
        d.is_neg()) {
      return false;  // (a negative view's alias must carry the bit: Python builds it)
    }
    const c10::Storage& ds = d.storage();
    c10::StorageImpl* dsi = ds.unsafeGetStorageImpl();
    if (!within_storage(d, dsi)) {
      return false;  // e.g. a parameter whose storage FSDP2 freed: Python raises a clear error
    }
    c10::Storage hs;
    for (auto& [k, v] : host_of) {
      if (k == dsi) {
        hs = v;
        break;
      }
    }
    if (!hs) {
      hs = c10::Storage(c10::Storage::use_byte_size_t(), dsi->nbytes(),
                        c10::DataPtr(const_cast<void*>(dsi->data_ptr().get()), c10::Device(c10::kCPU)),
                        nullptr, false);
      host_of.emplace_back(dsi, hs);
      device_of.emplace_back(hs.unsafeGetStorageImpl(), ds);
    }
    auto impl = c10::make_intrusive<c10::TensorImpl>(std::move(hs), c10::DispatchKeySet(c10::DispatchKey::CPU),
                                                     d.dtype());
    impl->set_sizes_and_strides(d.sizes(), d.strides(), d.storage_offset());
    *out = at::Tensor(std::move(impl));
    aliases.emplace_back(*out, d);
    return true;
  }

  bool convert(c10::IValue& v) {
    if (v.isTensor()) {
      at::Tensor h;
      if (!to_host(v.toTensor(), &h)) {
        return false;
      }
      v = std::move(h);
      return true;
    }
    if (v.isTensorList()) {
      auto list = v.toTensorList();
      c10::List<at::Tensor> hl;
      hl.reserve(list.size());
      for (const at::Tensor& t : list) {
        at::Tensor h;
        if (!to_host(t, &h)) {
          return false;
        }
        hl.push_back(std::move(h));
      }
      v = std::move(hl);
      return true;
    }
    if (v.isOptionalTensorList()) {
      auto list = v.toOptionalTensorList();
      c10::List<std::optional<at::Tensor>> hl;
      hl.reserve(list.size());
      for (const std::optional<at::Tensor>& t : list) {
        if (!t.has_value()) {
          hl.push_back(std::nullopt);
          continue;
        }
        at::Tensor h;
        if (!to_host(*t, &h)) {
          return false;
        }
        hl.push_back(std::move(h));
      }
      v = std::move(hl);
      return true;
    }
    if (v.isDevice()) {
      return v.toDevice().type() != kDevice;  // factory-style arguments: the Python kernel
    }
    if (v.isGenerator() || v.isObject() || v.isCapsule()) {
      return false;
    }
    return true;  // numbers, lists of numbers, strings, dtypes, None ...
  }

  bool is_alias(const at::Tensor& t) const {
    for (auto& [h, d] : aliases) {
      if (h.unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) {
        return true;
      }
    }
    return false;
  }

  // a result the device can hold: an argument written in place (whatever its dtype: nothing is
  // computed into a new value), or a new value of a native dtype. Checked before anything is
  // adopted; only functional operators can fail it, so the Python kernel may run them again.
  bool result_ok(const at::Tensor& t) const {
    return !t.defined() || t.device().type() != c10::kCPU || is_alias(t) ||
        (t.layout() == c10::kStrided && native_dtype(t.scalar_type()));
  }
  bool result_ok(const c10::IValue& v) const {
    if (v.isTensor()) {
      return result_ok(v.toTensor());
    }
    if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList()) {
        if (!result_ok(t)) {
          return false;
        }
      }
      return true;
    }
    return !v.isList() && !v.isTuple();
  }

  // `h` (a result of the CPU kernel) as a device tensor; false: out of (simulated) capacity
  bool to_device(const at::Tensor& h, at::Tensor* out) {
    if (!h.defined() || h.device().type() != c10::kCPU) {
      *out = h;
      return true;
    }
    for (auto& [a, d] : aliases) {
      if (a.unsafeGetTensorImpl() == h.unsafeGetTensorImpl()) {
        *out = d;
        return true;
      }
    }
    c10::StorageImpl* hsi = h.storage().unsafeGetStorageImpl();
    c10::Storage ds;
    for (auto& [k, v] : device_of) {
      if (k == hsi) {
        ds = v;
        break;
      }
    }
    if (!ds) {
      ds = adopt_storage(h.storage(), core);
      if (!ds) {
        return false;
      }
      device_of.emplace_back(hsi, ds);
    }
    *out = device_tensor(std::move(ds), h);
    return true;
  }

  // in-place kernels that restride `self` (a few legacy ones resize an empty self): the device
  // tensor takes the alias's new geometry
  void sync_geometry() {
    for (auto& [a, d] : aliases) {
      c10::TensorImpl* impl = a.unsafeGetTensorImpl();
      c10::TensorImpl* di = d.unsafeGetTensorImpl();
      if (impl->sizes() != di->sizes() || impl->strides() != di->strides() ||
          impl->storage_offset() != di->storage_offset()) {
        di->set_sizes_and_strides(impl->sizes(), impl->strides(), impl->storage_offset());
      }
    }
  }
};

std::atomic<bool> g_enabled{false};

struct FastKernel final : c10::OperatorKernel {
  FastKernel(std::string n, bool m) : name(std::move(n)), meta(m) {}

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
    if (!g_enabled.load(std::memory_order_relaxed)) {
      op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::PrivateUse2), stack);
    } else if (meta) {
      // a view or a change of geometry: the Meta kernel computes it on the device tensors
      // themselves (a view shares their storage); no bytes are touched
      op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), stack);
    } else if (!fast(op, stack)) {
      op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::PrivateUse2), stack);
    }
  }

  // true when the call ran here and `stack` holds its results; false with `stack` untouched
  bool fast(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
    const size_t n = op.schema().arguments().size();
    if (n && writes(op) && !exact_dtypes()) {
      // an in-place op on a float64 / int64 tensor computes in 32 bits on the chip: the Python
      // kernel applies that rule (narrowing, the warning) before it runs the op
      const c10::IValue& self = (*stack)[stack->size() - n];
      if (self.isTensor() && self.toTensor().defined() && !native_dtype(self.toTensor().scalar_type())) {
        return false;
      }
    }
    Call call;
    torch::jit::Stack host;
    host.reserve(std::max(n, op.schema().returns().size()));
    for (size_t i = stack->size() - n; i < stack->size(); ++i) {
      c10::IValue v = (*stack)[i];
      if (!call.convert(v)) {
        return false;
      }
      host.push_back(std::move(v));
    }
    if (call.core < 0 || call.core >= kMaxCores) {
      return false;  // no device tensor among the arguments
    }
    try {
      op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), &host);
    } catch (const std::exception&) {
      return false;  // the Python kernel runs it again and keeps the error contract
    }
    // past this point the operator has run: one that wrote into an argument must not run again
    auto give_up = [&](const char* why) {
      TORCH_CHECK(!writes(op), "neuron: ", name, " ran on the device but its result ", why,
                  " (internal error, please report)");
      return false;
    };
    for (const c10::IValue& r : host) {
      if (!call.result_ok(r)) {
        return give_up("has a dtype the device computes differently");
      }
    }
    if (writes(op)) {
      call.sync_geometry();  // only a kernel writing in place can have restrided an argument
    }
    torch::jit::Stack results;
    results.reserve(host.size());
    for (c10::IValue& r : host) {
      if (r.isTensor()) {
        at::Tensor d;
        if (!call.to_device(r.toTensor(), &d)) {
          return give_up("does not fit the device memory");
        }
        results.emplace_back(std::move(d));
      } else if (r.isTensorList()) {
        c10::List<at::Tensor> dl;
        dl.reserve(r.toTensorList().size());
        for (const at::Tensor& t : r.toTensorList()) {
          at::Tensor d;
          if (!call.to_device(t, &d)) {
            return give_up("does not fit the device memory");
          }
          dl.push_back(std::move(d));
        }
        results.emplace_back(std::move(dl));
      } else {
        results.push_back(std::move(r));
      }
    }
    torch::jit::drop(*stack, n);
    for (auto& r : results) {
      stack->push_back(std::move(r));
    }
    count.fetch_add(1, std::memory_order_relaxed);
    return true;
  }

  bool writes(const c10::OperatorHandle& op) {
    int w = writes_.load(std::memory_order_relaxed);
    if (w < 0) {
      w = 0;
      for (const auto& a : op.schema().arguments()) {
        if (a.alias_info() != nullptr && a.alias_info()->isWrite()) {
          w = 1;
        }
      }
      writes_.store(w);
    }
    return w != 0;
  }

  std::string name;
  bool meta;  // served by the Meta kernel (views), not counted as device work
  std::atomic<int64_t> count{0};
  std::atomic<int> writes_{-1};  // whether the operator writes into an argument (-1: not known yet)
};

std::vector<FastKernel*>& kernels() {
  static auto* k = new std::vector<FastKernel*>();
  return *k;
}

std::mutex& registration_mutex() {
  static auto* m = new std::mutex();
  return *m;
}

// ---- Python API -------------------------------------------------------------------------------
PyObject* py_register(PyObject*, PyObject* args) {
  PyObject* names = nullptr;
  int meta = 0;
  if (!PyArg_ParseTuple(args, "Op", &names, &meta)) {
    return nullptr;
  }
  PyObject* seq = PySequence_Fast(names, "register() expects a sequence of operator names");
  if (seq == nullptr) {
    return nullptr;
  }
  try {
    std::lock_guard<std::mutex> lock(registration_mutex());
    // one library object per call, kept for the life of the process (registrations die with it)
    auto* lib = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__,
                                   __LINE__);
    Py_ssize_t size = PySequence_Fast_GET_SIZE(seq);
    for (Py_ssize_t i = 0; i < size; ++i) {
      const char* name = PyUnicode_AsUTF8(PySequence_Fast_GET_ITEM(seq, i));
      if (name == nullptr) {
        Py_DECREF(seq);
        return nullptr;
      }
      auto kernel = std::make_unique<FastKernel>(name, meta != 0);
      kernels().push_back(kernel.get());
      lib->impl(name, torch::CppFunction::makeFromBoxedFunctor(std::move(kernel)));
    }
  } catch (const std::exception& e) {
    Py_DECREF(seq);
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
  Py_DECREF(seq);
  Py_RETURN_NONE;
}

PyObject* py_set_enabled(PyObject*, PyObject* flag) {
  int truth = PyObject_IsTrue(flag);
  if (truth < 0) {
    return nullptr;
  }
  g_enabled.store(truth != 0);
  Py_RETURN_NONE;
}

PyObject* py_enabled(PyObject*, PyObject*) {
  return PyBool_FromLong(g_enabled.load() ? 1 : 0);
}

PyObject* py_counts(PyObject*, PyObject*) {
  PyObject* d = PyDict_New();
  if (d == nullptr) {
    return nullptr;
  }
  std::lock_guard<std::mutex> lock(registration_mutex());
  for (FastKernel* k : kernels()) {
    int64_t c = k->count.load();
    if (c == 0) {
      continue;
    }
    PyObject* v = PyLong_FromLongLong(c);
    if (v == nullptr || PyDict_SetItemString(d, k->name.c_str(), v) < 0) {
      Py_XDECREF(v);
      Py_DECREF(d);
      return nullptr;
    }
    Py_DECREF(v);
  }
  return d;
}

PyObject* py_clear_counts(PyObject*, PyObject*) {
  std::lock_guard<std::mutex> lock(registration_mutex());
  for (FastKernel* k : kernels()) {
    k->count.store(0);
  }
  Py_RETURN_NONE;
}

PyObject* py_owns(PyObject*, PyObject* obj) {
  if (!THPStorage_Check(obj)) {
    PyErr_Format(PyExc_TypeError, "expected a torch.UntypedStorage, got %s", Py_TYPE(obj)->tp_name);
    return nullptr;
  }
  const c10::Storage& st = THPStorage_Unpack(obj);
  bool owned = st.unsafeGetStorageImpl() != nullptr &&
      st.unsafeGetStorageImpl()->data_ptr().get_deleter() == &adopted_delete;
  return PyBool_FromLong(owned ? 1 : 0);
}

// the host storage that owns an adopted device storage's bytes (the kernel's own result storage),
// or None: Python's host aliases of such a device tensor hold it, so they keep the bytes alive
// for as long as they are in use (an asynchronous collective, say), as for Python allocations
PyObject* py_host_storage(PyObject*, PyObject* obj) {
  if (!THPStorage_Check(obj)) {
    PyErr_Format(PyExc_TypeError, "expected a torch.UntypedStorage, got %s", Py_TYPE(obj)->tp_name);
    return nullptr;
  }
  const c10::Storage& st = THPStorage_Unpack(obj);
  c10::StorageImpl* impl = st.unsafeGetStorageImpl();
  if (impl == nullptr || impl->data_ptr().get_deleter() != &adopted_delete) {
    Py_RETURN_NONE;
  }
  auto* adopted = static_cast<Adopted*>(impl->data_ptr().get_context());
  return THPStorage_Wrap(adopted->host);
}

// ---- the boundary of compiled programs --------------------------------------------------------
// A compiled program (torchneuron/compiler/executable.py) reads its inputs' bytes through host
// aliases passed to the runtime, and its results are fresh host buffers adopted as device memory.
// In Python each value cost 5-15 us there; a CNN's training step calls a few dozen small programs
// with a dozen values each (ResNet-18's step in bench/compile.py: ~12 of its ~80 ms). These two
// do the same in C++ while the fast path is on (nothing observes memory or records operations).

// a host alias's hold on the device storage whose bytes it reads
void alias_delete(void* ctx) {
  delete static_cast<c10::Storage*>(ctx);
}

// whether the runtime can read the device tensor `d` through a plain host alias: dense bytes
// at a 64-byte boundary (what IREE imports), no bit a host alias would have to carry
bool passes_as_is(const at::Tensor& d) {
  if (d.layout() != c10::kStrided || !d.has_storage() || d.is_neg() || d.is_conj() ||
      d.scalar_type() == c10::ScalarType::Bool || d.numel() == 0 || !d.is_contiguous()) {
    return false;
  }
  const c10::StorageImpl* st = d.storage().unsafeGetStorageImpl();
  return within_storage(d, st) && reinterpret_cast<uintptr_t>(d.data_ptr()) % 64 == 0;
}

// a CPU tensor over the device tensor's bytes, holding its storage
at::Tensor alias_of(const at::Tensor& d) {
  const c10::Storage& ds = d.storage();
  void* data = const_cast<void*>(ds.unsafeGetStorageImpl()->data_ptr().get());
  c10::Storage hs(c10::Storage::use_byte_size_t(), ds.nbytes(),
                  c10::DataPtr(data, new c10::Storage(ds), &alias_delete, c10::Device(c10::kCPU)), nullptr, false);
  auto impl = c10::make_intrusive<c10::TensorImpl>(std::move(hs), c10::DispatchKeySet(c10::DispatchKey::CPU), d.dtype());
  impl->set_sizes_and_strides(d.sizes(), d.strides(), d.storage_offset());
  return at::Tensor(std::move(impl));
}

// a list of fn(t) for the tensors t of the sequence `arg`, None where fn gives an undefined tensor
// (or the item is not a plain tensor); nullptr with a Python error set if anything fails
template <typename F>
PyObject* map_tensors(PyObject* arg, const char* what, F&& fn) {
  PyObject* seq = PySequence_Fast(arg, what);
  if (seq == nullptr) {
    return nullptr;
  }
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  PyObject* out = PyList_New(n);
  if (out == nullptr) {
    Py_DECREF(seq);
    return nullptr;
  }
  try {
    for (Py_ssize_t i = 0; i < n; ++i) {
      PyObject* item = PySequence_Fast_GET_ITEM(seq, i);
      at::Tensor r;
      if (THPVariable_CheckExact(item)) {
        r = fn(THPVariable_Unpack(item));
      }
      PyObject* o = Py_None;
      if (r.defined()) {
        o = THPVariable_Wrap(std::move(r));
        if (o == nullptr) {
          throw std::runtime_error("could not wrap a tensor");
        }
      } else {
        Py_INCREF(Py_None);
      }
      PyList_SET_ITEM(out, i, o);
    }
  } catch (const std::exception& e) {
    Py_DECREF(seq);
    Py_DECREF(out);
    if (!PyErr_Occurred()) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
    }
    return nullptr;
  }
  Py_DECREF(seq);
  return out;
}

// host_aliases(tensors) -> (aliases, core), or None while the fast path is off. aliases[i] is a
// CPU tensor over tensors[i]'s bytes when it is a device tensor the runtime can read as it is
// (passes_as_is), else None (the caller's Python path handles it); core is the logical core of
// the first device tensor, or -1
PyObject* py_host_aliases(PyObject*, PyObject* arg) {
  if (!g_enabled.load(std::memory_order_relaxed)) {
    Py_RETURN_NONE;
  }
  int core = -1;
  PyObject* aliases = map_tensors(arg, "host_aliases() expects a sequence of tensors", [&](const at::Tensor& d) {
    if (!d.defined() || d.device().type() != kDevice) {
      return at::Tensor();
    }
    if (core < 0) {
      core = d.device().index();
    }
    return passes_as_is(d) ? alias_of(d) : at::Tensor();
  });
  return aliases == nullptr ? nullptr : Py_BuildValue("(Ni)", aliases, core);
}

// adopt_results(tensors, core) -> list, or None while the fast path is off: each CPU tensor (a
// program's fresh result) as a device tensor of `core` owning its bytes, accounted as a new
// allocation; None for one that is not a plain CPU tensor or does not fit the core's capacity
// (the caller's Python path handles it: the allocator empties its cache, or raises the OOM error)
PyObject* py_adopt_results(PyObject*, PyObject* args) {
  PyObject* tensors = nullptr;
  int core = 0;
  if (!PyArg_ParseTuple(args, "Oi", &tensors, &core)) {
    return nullptr;
  }
  if (core < 0 || core >= kMaxCores) {
    PyErr_Format(PyExc_ValueError, "no logical core %d", core);
    return nullptr;
  }
  if (!g_enabled.load(std::memory_order_relaxed)) {
    Py_RETURN_NONE;
  }
  return map_tensors(tensors, "adopt_results() expects a sequence of tensors", [&](const at::Tensor& h) {
    if (!h.defined() || h.device().type() != c10::kCPU || h.layout() != c10::kStrided || !h.has_storage() ||
        h.is_neg() || h.is_conj()) {
      return at::Tensor();
    }
    c10::Storage ds = adopt_storage(h.storage(), core);
    return ds ? device_tensor(std::move(ds), h) : at::Tensor();
  });
}

// accounts: alloc(nbytes, rounded, from_cache), free(nbytes, rounded, to_cache), unreserve(n)
// the accounts of the core named by the first argument; nullptr with a Python error if invalid
Accounts* core_accounts(int core) {
  if (core < 0 || core >= kMaxCores) {
    PyErr_Format(PyExc_ValueError, "no logical core %d", core);
    return nullptr;
  }
  return &accounts(core);
}

Accounts* core_accounts(PyObject* arg) {
  long core = PyLong_AsLong(arg);
  if (core == -1 && PyErr_Occurred()) {
    return nullptr;
  }
  return core_accounts(static_cast<int>(core));
}

PyObject* py_account_alloc(PyObject*, PyObject* args) {
  int core = 0;
  long long nbytes = 0, rounded = 0;
  int from_cache = 0;
  if (!PyArg_ParseTuple(args, "iLLp", &core, &nbytes, &rounded, &from_cache)) {
    return nullptr;
  }
  Accounts* a = core_accounts(core);
  if (a == nullptr) {
    return nullptr;
  }
  auto& acc = *a;
  std::lock_guard<std::mutex> lock(acc.mutex);
  acc.alloc_locked(nbytes, rounded, from_cache != 0);
  Py_RETURN_NONE;
}

PyObject* py_account_free(PyObject*, PyObject* args) {
  int core = 0;
  long long nbytes = 0, rounded = 0;
  int to_cache = 0;
  if (!PyArg_ParseTuple(args, "iLLp", &core, &nbytes, &rounded, &to_cache)) {
    return nullptr;
  }
  Accounts* a = core_accounts(core);
  if (a == nullptr) {
    return nullptr;
  }
  auto& acc = *a;
  std::lock_guard<std::mutex> lock(acc.mutex);
  acc.free_locked(nbytes, rounded, to_cache != 0);
  Py_RETURN_NONE;
}

// (core, n) arguments: the core's accounts, or nullptr with a Python error set
Accounts* core_and_amount(PyObject* args, long long* n) {
  int core = 0;
  if (!PyArg_ParseTuple(args, "iL", &core, n)) {
    return nullptr;
  }
  return core_accounts(core);
}

PyObject* py_account_unreserve(PyObject*, PyObject* args) {
  long long n = 0;
  Accounts* a = core_and_amount(args, &n);
  if (a == nullptr) {
    return nullptr;
  }
  std::lock_guard<std::mutex> lock(a->mutex);
  a->reserved -= n;
  Py_RETURN_NONE;
}

PyObject* py_account_get(PyObject*, PyObject* arg) {
  Accounts* a = core_accounts(arg);
  if (a == nullptr) {
    return nullptr;
  }
  auto& acc = *a;
  std::lock_guard<std::mutex> lock(acc.mutex);
  return Py_BuildValue("(LLLLLLL)", static_cast<long long>(acc.allocated), static_cast<long long>(acc.reserved),
                       static_cast<long long>(acc.peak_allocated), static_cast<long long>(acc.peak_reserved),
                       static_cast<long long>(acc.num_allocs), static_cast<long long>(acc.num_frees),
                       static_cast<long long>(acc.active));
}

PyObject* py_account_reset_peak(PyObject*, PyObject* arg) {
  Accounts* a = core_accounts(arg);
  if (a == nullptr) {
    return nullptr;
  }
  auto& acc = *a;
  std::lock_guard<std::mutex> lock(acc.mutex);
  acc.peak_allocated = acc.allocated;
  acc.peak_reserved = acc.reserved;
  Py_RETURN_NONE;
}

PyObject* py_account_reset_counts(PyObject*, PyObject* arg) {
  Accounts* a = core_accounts(arg);
  if (a == nullptr) {
    return nullptr;
  }
  auto& acc = *a;
  std::lock_guard<std::mutex> lock(acc.mutex);
  acc.num_allocs = 0;
  acc.num_frees = 0;
  Py_RETURN_NONE;
}

PyObject* py_set_capacity(PyObject*, PyObject* args) {
  long long n = 0;
  Accounts* a = core_and_amount(args, &n);
  if (a == nullptr) {
    return nullptr;
  }
  std::lock_guard<std::mutex> lock(a->mutex);
  a->capacity = n;
  Py_RETURN_NONE;
}

PyMethodDef methods[] = {
    {"register", py_register, METH_VARARGS,
     "register(names, meta): the fast kernel for these aten overloads on PrivateUse1 (their "
     "Python kernels must be registered on PrivateUse2); meta: views served by the Meta kernel"},
    {"set_enabled", py_set_enabled, METH_O, "switch the fast path on or off (off: every call goes to Python)"},
    {"enabled", py_enabled, METH_NOARGS, "whether the fast path is on"},
    {"counts", py_counts, METH_NOARGS, "{overload name: calls that ran on the fast path}"},
    {"clear_counts", py_clear_counts, METH_NOARGS, "reset the call counts"},
    {"owns", py_owns, METH_O, "whether a neuron storage holds memory this module adopted"},
    {"host_storage", py_host_storage, METH_O,
     "the CPU storage owning an adopted neuron storage's bytes, or None"},
    {"host_aliases", py_host_aliases, METH_O,
     "host_aliases(tensors) -> (aliases, core) or None: host aliases of the device tensors a compiled program "
     "reads as they are (None for the others), and the first device tensor's core"},
    {"adopt_results", py_adopt_results, METH_VARARGS,
     "adopt_results(tensors, core) -> list or None: a program's host results as device tensors of the core "
     "(None for those the Python path must take)"},
    {"account_alloc", py_account_alloc, METH_VARARGS, "account_alloc(core, nbytes, rounded, from_cache)"},
    {"account_free", py_account_free, METH_VARARGS, "account_free(core, nbytes, rounded, to_cache)"},
    {"account_unreserve", py_account_unreserve, METH_VARARGS, "account_unreserve(core, n): reserved -= n"},
    {"account_get", py_account_get, METH_O,
     "account_get(core) -> (allocated, reserved, peak_allocated, peak_reserved, num_allocs, num_frees, "
     "active_blocks)"},
    {"account_reset_peak", py_account_reset_peak, METH_O, "account_reset_peak(core): peaks := current values"},
    {"account_reset_counts", py_account_reset_counts, METH_O, "account_reset_counts(core): counts := 0"},
    {"set_capacity", py_set_capacity, METH_VARARGS,
     "set_capacity(core, n): a core's capacity in bytes (adoptions beyond it go to Python)"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_neuron_fast", "torchneuron's C++ eager kernels", -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit__neuron_fast() {
  return PyModule_Create(&module);
}
