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
//
// Deliberately no pybind11 code and no torch/extension.h, to keep the first-use build short.

#include <Python.h>

#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/Allocator.h>
#include <c10/core/Storage.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/util/Exception.h>
#include <torch/csrc/Exceptions.h>
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

// ---- the hooks -----------------------------------------------------------------------------------
bool python_usable() {
  return Py_IsInitialized() && !_Py_IsFinalizing();
}

struct NeuronHooks final : at::PrivateUse1HooksInterface {
  NeuronHooks(PyObject* py_hooks, PyObject* resize) : py_hooks_(py_hooks), resize_(resize) {
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
};

bool installed = false;

// ---- module functions ---------------------------------------------------------------------------
PyObject* install(PyObject* /*self*/, PyObject* args) {
  PyObject* py_hooks = nullptr;
  PyObject* resize = nullptr;
  if (!PyArg_ParseTuple(args, "OO", &py_hooks, &resize)) {
    return nullptr;
  }
  if (!PyCallable_Check(resize)) {
    PyErr_SetString(PyExc_TypeError, "resize must be callable");
    return nullptr;
  }
  if (installed) {
    Py_RETURN_TRUE;
  }
  if (at::isPrivateUse1HooksRegistered()) {
    Py_RETURN_FALSE;  // someone registered PrivateUse1 hooks first (only one registration)
  }
  try {
    at::RegisterPrivateUse1HooksInterface(new NeuronHooks(py_hooks, resize));  // leaked on purpose
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
  installed = true;
  Py_RETURN_TRUE;
}

PyObject* is_installed(PyObject* /*self*/, PyObject* /*unused*/) {
  return PyBool_FromLong(installed ? 1 : 0);
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
     "install(python_hooks, resize) -> bool: register the neuron PrivateUse1 hooks"},
    {"is_installed", is_installed, METH_NOARGS, "whether install() registered the hooks"},
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
