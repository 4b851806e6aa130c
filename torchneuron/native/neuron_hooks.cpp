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
//     torch.neuron.default_generators[0] act on one stream of random numbers.
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
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/Storage.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>

namespace {

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
// A generator whose device is neuron:0 and whose state is a CPU generator's. Every method
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
  explicit NeuronGenerator(at::Generator host)
      : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, 0),
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
    return new NeuronGenerator(host_.clone());  // an independent copy of the state
  }

  at::Generator host_;
};

void check_index(c10::DeviceIndex device_index) {
  TORCH_CHECK(device_index == -1 || device_index == 0, "neuron:", static_cast<int>(device_index),
              " does not exist: this process drives one NeuronCore, neuron:0");
}

// ---- the hooks -----------------------------------------------------------------------------------
bool python_usable() {
  return Py_IsInitialized() && !_Py_IsFinalizing();
}

struct NeuronHooks final : at::PrivateUse1HooksInterface {
  NeuronHooks(PyObject* py_hooks, PyObject* resize, at::Generator default_host)
      : py_hooks_(py_hooks),
        resize_(resize),
        default_generator_(at::make_generator<NeuronGenerator>(std::move(default_host))) {
    Py_INCREF(py_hooks_);  // owned for the life of the process, like PyTorch's Python hooks
    Py_INCREF(resize_);
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
    check_index(device_index);
    // a fresh CPU generator with PyTorch's default seed, as torch.Generator("cuda") has
    return at::make_generator<NeuronGenerator>(at::detail::createCPUGenerator());
  }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex device_index) const override {
    check_index(device_index);
    return default_generator_;
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
    impl->set_data_ptr_noswap(
        c10::DataPtr(ptr, c10::Device(c10::DeviceType::PrivateUse1, 0)));
    impl->set_nbytes(newsize);
  }

 private:
  PyObject* py_hooks_;
  PyObject* resize_;
  at::Generator default_generator_;
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
  PyObject* default_host = nullptr;
  if (!PyArg_ParseTuple(args, "OOO", &py_hooks, &resize, &default_host)) {
    return nullptr;
  }
  if (!PyCallable_Check(resize)) {
    PyErr_SetString(PyExc_TypeError, "resize must be callable");
    return nullptr;
  }
  at::Generator host;
  if (!unwrap_generator(default_host, c10::DeviceType::CPU, &host)) {
    return nullptr;
  }
  if (installed != nullptr) {
    Py_RETURN_TRUE;
  }
  if (at::isPrivateUse1HooksRegistered()) {
    Py_RETURN_FALSE;  // someone registered PrivateUse1 hooks first (only one registration)
  }
  if (host.pyobj() == nullptr) {
    // host_generator(default) then answers with that very object (it lives until interpreter
    // shutdown, and freeing it clears the link)
    host.set_pyobj(default_host);
  }
  try {
    auto* hooks = new NeuronHooks(py_hooks, resize, std::move(host));  // leaked on purpose
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

// default_generator(): the device's default generator (a Python object wrapping it)
PyObject* default_generator(PyObject* /*self*/, PyObject* /*unused*/) {
  if (installed == nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "the neuron hooks are not installed");
    return nullptr;
  }
  return THPGenerator_Wrap(installed->getDefaultGenerator(0));
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
     "install(python_hooks, resize, default_host_generator) -> bool: register the neuron "
     "PrivateUse1 hooks"},
    {"is_installed", is_installed, METH_NOARGS, "whether install() registered the hooks"},
    {"host_generator", host_generator, METH_O,
     "host_generator(g) -> torch.Generator: the CPU generator holding a neuron generator's state"},
    {"default_generator", default_generator, METH_NOARGS,
     "default_generator() -> torch.Generator: the device's default generator"},
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
