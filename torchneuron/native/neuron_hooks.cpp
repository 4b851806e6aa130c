// The PrivateUse1 hooks of the `neuron` device that PyTorch's Python hook class cannot provide.
//
// torch._C._acc.PrivateUse1Hooks (the Python hooks of torch.utils.backend_registration) forwards
// only is_built / is_available / has_primary_context to Python; everything else falls through to
// at::PrivateUse1HooksInterface, whose getPinnedMemoryAllocator() and resizePrivateUse1Bytes()
// throw. Those two are what DDP's Reducer (pinned staging of the used-parameter map) and FSDP2
// (untyped_storage().resize_() to free/re-allocate unsharded parameters) need.
//
// This module registers one C++ hook object *instead of* the Python one (PyTorch accepts a
// single registration per process). It keeps the Python hook object as the authority for the
// three methods it defines (forwarded with the GIL held) and adds:
//
//   * getPinnedMemoryAllocator / isPinnedPtr: page-locked host memory is ordinary host memory on
//     the simulated chip (its HBM is host RAM too); the allocator is the CPU allocator plus a
//     registry of live blocks so that Tensor.is_pinned() answers exactly.
//   * resizePrivateUse1Bytes: device memory belongs to torchneuron's Python caching allocator
//     (a Block kept in the storage's __dict__), so the resize is delegated to a Python callable
//     `resize(storage, nbytes) -> int` that swaps the Block and returns the new host address;
//     this function then points the very same StorageImpl at it. Every view and shallow copy
//     shares the StorageImpl, so all of them see the new bytes, and memory statistics stay exact.
//   * getNewGenerator / getDefaultGenerator: `torch.Generator(device="neuron")` and the device's
//     default generator. The simulated core's random kernels are the host CPU's, which accept
//     only CPU generators, so a neuron generator (NeuronGenerator below) is a thin shell around
//     a CPU generator that holds the state: `host_generator(g)` hands the kernels that CPU
//     generator (the same object, not a copy). The default generator wraps the CPU generator
//     that torchneuron.runtime.rng already owns, so torch.neuron.manual_seed / get_rng_state and
//     torch.neuron.default_generators[0] act on one stream of random numbers. Each logical core
//     has its own default generator (one CPU generator per core, owned by runtime.rng).
//
// It also registers the device guard (c10::impl::DeviceGuardImplInterface) in place of the Python
// guard of torch.utils.backend_registration, whose device count is fixed at 1 and whose current
// device is always 0: a process drives several logical NeuronCores (neuron:0 .. neuron:N-1), and
// the current one is per thread, as CUDA's is (the autograd engine's device threads select theirs
// through this guard). `empty(dtype, index)` makes the 0-byte neuron:index tensors that the
// runtime points at device memory (torch._C._acc.create_empty_tensor only makes neuron:0 ones).
//
// Deliberately no pybind11 code and no torch/extension.h, to keep the first-use build short.

#include <Python.h>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/Allocator.h>
#include <c10/core/Storage.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/util/Exception.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/Storage.h>
#include <torch/csrc/autograd/python_variable.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

namespace {

constexpr auto kDeviceType = c10::DeviceType::PrivateUse1;

// the number of logical cores this process drives (set once by install())
int g_device_count = 1;
// the current core of threads that never selected one (LOCAL_RANK's core under a launcher)
int g_default_index = 0;
thread_local int t_current_index = -1;

int current_index() {
  return t_current_index < 0 ? g_default_index : t_current_index;
}

// ---- pinned host memory ------------------------------------------------------------------------
struct PinnedRegistry {
  std::mutex mutex;
  std::map<uintptr_t, size_t> blocks;  // start -> size of every live pinned block
  size_t bytes = 0;
  size_t allocations = 0;
};

PinnedRegistry& registry() {
  static auto* r = new PinnedRegistry();  // leaked: blocks may die during static destruction
  return *r;
}

void pinned_delete(void* ptr) {
  if (ptr == nullptr) {
    return;
  }
  {
    auto& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    auto it = r.blocks.find(reinterpret_cast<uintptr_t>(ptr));
    if (it != r.blocks.end()) {
      r.bytes -= it->second;
      r.blocks.erase(it);
    }
  }
  c10::free_cpu(ptr);
}

struct PinnedAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    void* ptr = nbytes == 0 ? nullptr : c10::alloc_cpu(nbytes);
    if (ptr != nullptr) {
      auto& r = registry();
      std::lock_guard<std::mutex> lock(r.mutex);
      r.blocks[reinterpret_cast<uintptr_t>(ptr)] = nbytes;
      r.bytes += nbytes;
      r.allocations += 1;
    }
    return {ptr, ptr, &pinned_delete, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override {
    return &pinned_delete;
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

bool is_pinned(const void* data) {
  auto& r = registry();
  auto p = reinterpret_cast<uintptr_t>(data);
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.blocks.upper_bound(p);
  if (it == r.blocks.begin()) {
    return false;
  }
  --it;
  return p >= it->first && p < it->first + it->second;
}

// ---- the device generator ------------------------------------------------------------------------
// A generator whose device is a neuron core and whose state is a CPU generator's. Every method
// forwards to that CPU generator under its mutex (host kernels lock the same mutex), so the
// seed, state and the numbers drawn are exactly those of a CPU generator in the same state.
//
// Its dispatch key is PrivateUse1, like every device generator's: a random operator given a
// neuron generator reaches the device's kernels even when its tensors live on the host, and
// those kernels draw from the generator's stream. `torch.randn(shape, generator=g)` on the CPU
// therefore works with a neuron generator and gives the numbers the device would give; diffusers'
// randn_tensor relies on it (for a `neuron` target it always samples on the CPU, whatever the
// generator's device). CPU kernels, reached without that key, would reject the generator.
struct NeuronGenerator final : c10::GeneratorImpl {
  NeuronGenerator(at::Generator host, c10::DeviceIndex index)
      : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, index),
                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
        host_(std::move(host)) {}

  const at::Generator& host() const {
    return host_;
  }

  void set_current_seed(uint64_t seed) override {
    std::lock_guard<std::mutex> lock(host_mutex());
    impl()->set_current_seed(seed);
  }
  // The state is a Mersenne Twister's (the host's), which has no Philox offset. Pickling a
  // non-CPU generator saves get_offset() and restores it with set_offset() before set_state(),
  // so the offset reads as 0 and only 0 can be written back.
  void set_offset(uint64_t offset) override {
    TORCH_CHECK(offset == 0, "a neuron generator has no offset (its state is a CPU Mersenne "
                "Twister's); use get_state()/set_state()");
  }
  uint64_t get_offset() const override {
    return 0;
  }
  uint64_t current_seed() const override {
    std::lock_guard<std::mutex> lock(host_mutex());
    return impl()->current_seed();
  }
  uint64_t seed() override {
    std::lock_guard<std::mutex> lock(host_mutex());
    return impl()->seed();
  }
  void set_state(const c10::TensorImpl& new_state) override {
    std::lock_guard<std::mutex> lock(host_mutex());
    impl()->set_state(new_state);
  }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    std::lock_guard<std::mutex> lock(host_mutex());
    return impl()->get_state();
  }

 private:
  c10::GeneratorImpl* impl() const {
    return host_.unsafeGetGeneratorImpl();
  }
  std::mutex& host_mutex() const {
    return impl()->mutex_;
  }
  NeuronGenerator* clone_impl() const override {
    std::lock_guard<std::mutex> lock(host_mutex());
    return new NeuronGenerator(host_.clone(), device().index());  // an independent copy of the state
  }

  at::Generator host_;
};

bool python_usable() {
  return Py_IsInitialized() && !_Py_IsFinalizing();
}

// `device_index` (-1: the current core) checked against the cores of this process
c10::DeviceIndex checked_index(c10::DeviceIndex device_index) {
  if (device_index < 0) {
    return static_cast<c10::DeviceIndex>(current_index());
  }
  TORCH_CHECK(device_index < g_device_count, "neuron:", static_cast<int>(device_index),
              " does not exist: this process has ", g_device_count, " logical NeuronCore",
              g_device_count == 1 ? "" : "s", " (neuron:0", g_device_count == 1 ? "" : " .. neuron:",
              g_device_count == 1 ? "" : std::to_string(g_device_count - 1), ")");
  return device_index;
}

// ---- the device guard ----------------------------------------------------------------------------
// Streams and events are torchneuron.runtime.queue's (Python objects over one in-order queue per
// core, where work completes at launch): at this level a stream is the core's default stream and
// events are already complete, as with the Python guard this replaces. Synchronising a core
// calls back into Python, which raises the earliest deferred device error.
struct NeuronGuard final : c10::impl::DeviceGuardImplInterface {
  explicit NeuronGuard(PyObject* synchronize) : synchronize_(synchronize) {
    Py_INCREF(synchronize_);
  }

  c10::DeviceType type() const override {
    return kDeviceType;
  }
  c10::Device exchangeDevice(c10::Device d) const override {
    c10::Device old = getDevice();
    setDevice(d);
    return old;
  }
  c10::Device getDevice() const override {
    return c10::Device(kDeviceType, static_cast<c10::DeviceIndex>(current_index()));
  }
  void setDevice(c10::Device d) const override {
    TORCH_CHECK(d.type() == kDeviceType, "neuron device guard given a ", d.str(), " device");
    t_current_index = checked_index(d.index());
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (d.index() >= 0 && d.index() < g_device_count) {
      t_current_index = d.index();
    }
  }
  c10::Stream getStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::DEFAULT, with_index(d));
  }
  c10::Stream getNewStream(c10::Device d, int /*priority*/) const override {
    return c10::Stream(c10::Stream::DEFAULT, with_index(d));
  }
  c10::Stream exchangeStream(c10::Stream s) const override {
    return c10::Stream(c10::Stream::DEFAULT, s.device());
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    return static_cast<c10::DeviceIndex>(g_device_count);
  }
  void record(void** /*event*/, const c10::Stream& /*stream*/, const c10::DeviceIndex /*device_index*/,
              const c10::EventFlag /*flag*/) const override {}
  void block(void* /*event*/, const c10::Stream& /*stream*/) const override {}
  bool queryEvent(void* /*event*/) const override {
    return true;
  }
  void destroyEvent(void* /*event*/, const c10::DeviceIndex /*device_index*/) const noexcept override {}
  bool queryStream(const c10::Stream& /*stream*/) const override {
    return true;
  }
  void synchronizeStream(const c10::Stream& s) const override {
    synchronizeDevice(s.device_index());
  }
  void synchronizeEvent(void* /*event*/) const override {}
  void synchronizeDevice(const c10::DeviceIndex device_index) const override {
    TORCH_CHECK(python_usable(), "neuron: synchronize after interpreter shutdown");
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject* res = PyObject_CallFunction(synchronize_, "i", static_cast<int>(checked_index(device_index)));
    if (res == nullptr) {
      python_error err;
      err.persist();  // the deferred device error, with its context
      PyGILState_Release(gil);
      throw err;
    }
    Py_DECREF(res);
    PyGILState_Release(gil);
  }

 private:
  c10::Device with_index(c10::Device d) const {
    return c10::Device(kDeviceType, checked_index(d.index()));
  }
  PyObject* synchronize_;
};

// ---- the hooks -----------------------------------------------------------------------------------

struct NeuronHooks final : at::PrivateUse1HooksInterface {
  NeuronHooks(PyObject* py_hooks, PyObject* resize, std::vector<at::Generator> default_hosts)
      : py_hooks_(py_hooks), resize_(resize) {
    Py_INCREF(py_hooks_);  // owned for the life of the process, like PyTorch's Python hooks
    Py_INCREF(resize_);
    for (size_t i = 0; i < default_hosts.size(); ++i) {
      default_generators_.push_back(
          at::make_generator<NeuronGenerator>(std::move(default_hosts[i]), static_cast<c10::DeviceIndex>(i)));
    }
  }

  // the Python hook object's answer (`device_index` < 0: no argument); `fallback` if Python
  // is gone or the method failed, since these hooks must not throw
  bool ask(const char* method, int device_index, bool fallback) const {
    if (!python_usable()) {
      return fallback;
    }
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject* res = device_index < 0 ? PyObject_CallMethod(py_hooks_, method, nullptr)
                                     : PyObject_CallMethod(py_hooks_, method, "i", device_index);
    bool answer = fallback;
    if (res == nullptr) {
      PyErr_Clear();
    } else {
      int truth = PyObject_IsTrue(res);
      if (truth < 0) {
        PyErr_Clear();
      } else {
        answer = truth != 0;
      }
      Py_DECREF(res);
    }
    PyGILState_Release(gil);
    return answer;
  }

  bool isBuilt() const override {
    return ask("is_built", -1, false);
  }
  bool isAvailable() const override {
    return ask("is_available", -1, false);
  }
  bool hasPrimaryContext(c10::DeviceIndex device_index) const override {
    return ask("has_primary_context", std::max<int>(device_index, 0), true);
  }

  bool isPinnedPtr(const void* data) const override {
    return is_pinned(data);
  }
  c10::Allocator* getPinnedMemoryAllocator() const override {
    static PinnedAllocator allocator;
    return &allocator;
  }

  at::Generator getNewGenerator(c10::DeviceIndex device_index) const override {
    // a fresh CPU generator with PyTorch's default seed, as torch.Generator("cuda") has
    return at::make_generator<NeuronGenerator>(at::detail::createCPUGenerator(), checked_index(device_index));
  }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex device_index) const override {
    return default_generators_[checked_index(device_index)];
  }

  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    TORCH_CHECK(python_usable(), "neuron: storage resize after interpreter shutdown");
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject* st = THPStorage_Wrap(storage);  // the storage's own Python object (keeps __dict__)
    PyObject* res = st == nullptr
        ? nullptr
        : PyObject_CallFunction(resize_, "On", st, static_cast<Py_ssize_t>(newsize));
    Py_XDECREF(st);
    void* ptr = nullptr;
    if (res != nullptr) {
      ptr = PyLong_AsVoidPtr(res);
      Py_DECREF(res);
    }
    if (PyErr_Occurred()) {
      python_error err;
      err.persist();  // keeps the Python exception (e.g. torch.OutOfMemoryError) intact
      PyGILState_Release(gil);
      throw err;
    }
    PyGILState_Release(gil);
    c10::StorageImpl* impl = storage.unsafeGetStorageImpl();
    // non-owning, like every neuron storage: the Python Block owns the bytes
    impl->set_data_ptr_noswap(c10::DataPtr(ptr, storage.device()));
    impl->set_nbytes(newsize);
  }

 private:
  PyObject* py_hooks_;
  PyObject* resize_;
  std::vector<at::Generator> default_generators_;  // one per logical core
};

NeuronHooks* installed = nullptr;

// the at::Generator behind the torch.Generator `obj` into `out`; false with a Python error set
// if `obj` is not a torch.Generator of device type `type`
bool unwrap_generator(PyObject* obj, c10::DeviceType type, at::Generator* out) {
  int is_gen = THPGenerator_Check(obj);
  if (is_gen < 0) {
    return false;
  }
  if (is_gen == 0) {
    PyErr_Format(PyExc_TypeError, "expected a torch.Generator, got %s", Py_TYPE(obj)->tp_name);
    return false;
  }
  at::Generator gen = reinterpret_cast<THPGenerator*>(obj)->cdata;
  if (!gen.defined() || gen.device().type() != type) {
    PyErr_Format(PyExc_TypeError, "expected a %s generator, got one on %s",
                 c10::DeviceTypeName(type, /*lower_case=*/true).c_str(),
                 gen.defined() ? gen.device().str().c_str() : "no device");
    return false;
  }
  *out = std::move(gen);
  return true;
}

// ---- module functions ---------------------------------------------------------------------------
PyObject* install(PyObject* /*self*/, PyObject* args) {
  PyObject* py_hooks = nullptr;
  PyObject* resize = nullptr;
  PyObject* default_hosts = nullptr;
  PyObject* synchronize = nullptr;
  int default_index = 0;
  if (!PyArg_ParseTuple(args, "OOOOi", &py_hooks, &resize, &default_hosts, &synchronize, &default_index)) {
    return nullptr;
  }
  if (!PyCallable_Check(resize) || !PyCallable_Check(synchronize)) {
    PyErr_SetString(PyExc_TypeError, "resize and synchronize must be callable");
    return nullptr;
  }
  PyObject* seq = PySequence_Fast(default_hosts, "default generators: a sequence, one per core");
  if (seq == nullptr) {
    return nullptr;
  }
  const Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
  if (count < 1 || count > 64 || default_index < 0 || default_index >= count) {
    Py_DECREF(seq);
    PyErr_Format(PyExc_ValueError, "%zd cores, default core %d: need 1..64 cores and a default among them",
                 count, default_index);
    return nullptr;
  }
  std::vector<at::Generator> hosts(static_cast<size_t>(count));
  for (Py_ssize_t i = 0; i < count; ++i) {
    if (!unwrap_generator(PySequence_Fast_GET_ITEM(seq, i), c10::DeviceType::CPU, &hosts[i])) {
      Py_DECREF(seq);
      return nullptr;
    }
  }
  if (installed != nullptr) {
    Py_DECREF(seq);
    Py_RETURN_TRUE;
  }
  if (at::isPrivateUse1HooksRegistered() || c10::impl::hasDeviceGuardImpl(kDeviceType)) {
    Py_DECREF(seq);
    Py_RETURN_FALSE;  // someone registered PrivateUse1 hooks or a guard first (only one registration)
  }
  for (Py_ssize_t i = 0; i < count; ++i) {
    if (hosts[i].pyobj() == nullptr) {
      // host_generator(default) then answers with that very object (it lives until interpreter
      // shutdown, and freeing it clears the link)
      hosts[i].set_pyobj(PySequence_Fast_GET_ITEM(seq, i));
    }
  }
  Py_DECREF(seq);
  try {
    g_device_count = static_cast<int>(count);
    g_default_index = default_index;
    c10::impl::registerDeviceGuard(kDeviceType, new NeuronGuard(synchronize));  // leaked on purpose
    auto* hooks = new NeuronHooks(py_hooks, resize, std::move(hosts));  // leaked on purpose
    at::RegisterPrivateUse1HooksInterface(hooks);
    installed = hooks;
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
  Py_RETURN_TRUE;
}

PyObject* is_installed(PyObject* /*self*/, PyObject* /*unused*/) {
  return PyBool_FromLong(installed != nullptr ? 1 : 0);
}

// host_generator(g): the CPU generator holding the state of the neuron generator `g`
PyObject* host_generator(PyObject* /*self*/, PyObject* obj) {
  at::Generator gen;
  if (!unwrap_generator(obj, c10::DeviceType::PrivateUse1, &gen)) {
    return nullptr;
  }
  auto* impl = dynamic_cast<NeuronGenerator*>(gen.unsafeGetGeneratorImpl());
  if (impl == nullptr) {
    PyErr_SetString(PyExc_TypeError, "not a generator made by torchneuron's device hooks");
    return nullptr;
  }
  return THPGenerator_Wrap(impl->host());  // the existing Python object if there is one
}

// default_generator(index): a core's default generator (a Python object wrapping it)
PyObject* default_generator(PyObject* /*self*/, PyObject* arg) {
  if (installed == nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "the neuron hooks are not installed");
    return nullptr;
  }
  long index = PyLong_AsLong(arg);
  if (index == -1 && PyErr_Occurred()) {
    return nullptr;
  }
  HANDLE_TH_ERRORS
  return THPGenerator_Wrap(installed->getDefaultGenerator(static_cast<c10::DeviceIndex>(index)));
  END_HANDLE_TH_ERRORS
}

// empty(dtype, index): a neuron:index tensor of shape (0,) with a 0-byte storage and no data, the
// shell the runtime points at device memory (set_ to a storage of the same core)
PyObject* empty(PyObject* /*self*/, PyObject* args) {
  PyObject* dtype = nullptr;
  int index = 0;
  if (!PyArg_ParseTuple(args, "Oi", &dtype, &index)) {
    return nullptr;
  }
  if (!THPDtype_Check(dtype)) {
    PyErr_Format(PyExc_TypeError, "expected a torch.dtype, got %s", Py_TYPE(dtype)->tp_name);
    return nullptr;
  }
  HANDLE_TH_ERRORS
  c10::Device device(kDeviceType, checked_index(static_cast<c10::DeviceIndex>(index)));
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, c10::DataPtr(nullptr, device), nullptr, false);
  auto impl = c10::make_intrusive<c10::TensorImpl>(std::move(storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                                   c10::scalarTypeToTypeMeta(reinterpret_cast<THPDtype*>(dtype)->scalar_type));
  impl->set_sizes_contiguous({0});
  return THPVariable_Wrap(at::Tensor(std::move(impl)));
  END_HANDLE_TH_ERRORS
}

PyObject* current_device(PyObject* /*self*/, PyObject* /*unused*/) {
  return PyLong_FromLong(current_index());
}

PyObject* set_device(PyObject* /*self*/, PyObject* arg) {
  long index = PyLong_AsLong(arg);
  if (index == -1 && PyErr_Occurred()) {
    return nullptr;
  }
  HANDLE_TH_ERRORS
  t_current_index = checked_index(static_cast<c10::DeviceIndex>(index));
  Py_RETURN_NONE;
  END_HANDLE_TH_ERRORS
}

PyObject* device_count(PyObject* /*self*/, PyObject* /*unused*/) {
  return PyLong_FromLong(g_device_count);
}

PyObject* pinned_stats(PyObject* /*self*/, PyObject* /*unused*/) {
  auto& r = registry();
  size_t bytes, blocks, allocations;
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    bytes = r.bytes;
    blocks = r.blocks.size();
    allocations = r.allocations;
  }
  return Py_BuildValue("{s:n,s:n,s:n}", "bytes", static_cast<Py_ssize_t>(bytes), "blocks",
                       static_cast<Py_ssize_t>(blocks), "allocations",
                       static_cast<Py_ssize_t>(allocations));
}

PyMethodDef methods[] = {
    {"install", install, METH_VARARGS,
     "install(python_hooks, resize, default_host_generators, synchronize, default_index) -> bool: "
     "register the neuron PrivateUse1 hooks and device guard for len(default_host_generators) cores"},
    {"is_installed", is_installed, METH_NOARGS, "whether install() registered the hooks"},
    {"host_generator", host_generator, METH_O,
     "host_generator(g) -> torch.Generator: the CPU generator holding a neuron generator's state"},
    {"default_generator", default_generator, METH_O,
     "default_generator(index) -> torch.Generator: a core's default generator"},
    {"empty", empty, METH_VARARGS, "empty(dtype, index) -> a 0-byte neuron:index tensor"},
    {"current_device", current_device, METH_NOARGS, "the calling thread's current core"},
    {"set_device", set_device, METH_O, "set_device(index): the calling thread's current core"},
    {"device_count", device_count, METH_NOARGS, "the number of logical cores of this process"},
    {"pinned_stats", pinned_stats, METH_NOARGS, "live pinned host memory: bytes, blocks, allocations"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_neuron_hooks", "neuron PrivateUse1 hooks (see neuron_hooks.cpp)", -1,
    methods,
};

}  // namespace

PyMODINIT_FUNC PyInit__neuron_hooks() {
  return PyModule_Create(&module_def);
}
