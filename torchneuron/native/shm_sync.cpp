// Cross-process synchronisation for the shared-memory collectives of the `neuron` c10d backend.
//
// Ranks on one host share a memory segment (torchneuron/distributed/shm.py maps it and moves the
// bytes with torch operators); what Python cannot do portably is the control plane: publish "I
// have reached step G" with release semantics and wait, cheaply and with a deadline, until every
// rank has. That is this module.
//
// The segment's control area holds one 256-byte line per rank:
//   [0]   uint64  generation the rank has reached (written by that rank only)
//   [8]   int64   the rank's process id (written at attach, read by the liveness check)
//   [16]  int64 x 12  signature of the rank's collective, even-numbered checks } plain stores by
//   [128] int64 x 12  signature of the rank's collective, odd-numbered checks  } Python before
//                     `arrive_wait`, published by its release store (two areas, so that a rank
//                     that has moved on cannot overwrite what a slower one is still comparing)
// and the segment header holds an abort word at byte 64: a rank that fails in the middle of a
// collective sets it, and every waiter returns at once instead of running into the timeout.
//
// `arrive_wait(ctrl, header, rank, size, gen, timeout_s, check_pids)` stores `gen` into the rank's
// line, then waits until every line reads >= gen. Waiting spins briefly, then yields the CPU,
// then sleeps in short steps (ranks may outnumber cores), with the GIL released throughout.
// Returns (0, -1) when all arrived, (1, r) on timeout with r the first missing rank, (2, r) when
// rank r's process no longer exists, (3, r) when the abort word was set (r = the rank that set it).
//
// Only Python.h: the module builds in about a second.

#include <Python.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <csignal>
#include <ctime>
#include <sched.h>
#include <sys/types.h>

namespace {

constexpr std::size_t kLine = 256;
constexpr std::size_t kAbortOffset = 64;

inline std::atomic<uint64_t>* gen_of(uintptr_t ctrl, long r) {
  return reinterpret_cast<std::atomic<uint64_t>*>(ctrl + static_cast<uintptr_t>(r) * kLine);
}

inline int64_t pid_of(uintptr_t ctrl, long r) {
  return reinterpret_cast<std::atomic<int64_t>*>(ctrl + static_cast<uintptr_t>(r) * kLine + 8)
      ->load(std::memory_order_relaxed);
}

inline std::atomic<int64_t>* abort_word(uintptr_t header) {
  return reinterpret_cast<std::atomic<int64_t>*>(header + kAbortOffset);
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

bool process_gone(int64_t pid) {
  if (pid <= 0) return false;
  return ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}

PyObject* arrive_wait(PyObject*, PyObject* args) {
  unsigned long long ctrl = 0, header = 0, gen = 0;
  long rank = 0, size = 0;
  double timeout_s = 0;
  int check_pids = 0;
  if (!PyArg_ParseTuple(args, "KKllKdp", &ctrl, &header, &rank, &size, &gen, &timeout_s, &check_pids))
    return nullptr;
  if (rank < 0 || rank >= size) {
    PyErr_SetString(PyExc_ValueError, "arrive_wait: rank out of range");
    return nullptr;
  }
  int status = 0;
  long who = -1;
  Py_BEGIN_ALLOW_THREADS;
  gen_of(ctrl, rank)->store(gen, std::memory_order_release);
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  const auto deadline = start + std::chrono::duration_cast<clock::duration>(
                                    std::chrono::duration<double>(timeout_s));
  auto next_pid_check = start + std::chrono::milliseconds(100);
  long next = 0;  // ranks before `next` have arrived
  for (uint64_t spin = 0;; ++spin) {
    while (next < size && gen_of(ctrl, next)->load(std::memory_order_acquire) >= gen) ++next;
    if (next == size) break;
    const int64_t aborted = abort_word(header)->load(std::memory_order_acquire);
    if (aborted != 0) {
      status = 3;
      who = static_cast<long>(aborted - 1);
      break;
    }
    if (spin < 512) {
      cpu_relax();
      continue;
    }
    if ((spin & 63) == 0) {
      const auto now = clock::now();
      if (now >= deadline) {
        status = 1;
        who = next;
        break;
      }
      if (check_pids && now >= next_pid_check) {
        next_pid_check = now + std::chrono::milliseconds(100);
        for (long r = 0; r < size; ++r) {
          if (r != rank && gen_of(ctrl, r)->load(std::memory_order_acquire) < gen &&
              process_gone(pid_of(ctrl, r))) {
            status = 2;
            who = r;
            break;
          }
        }
        if (status != 0) break;
      }
      const auto waited = now - start;
      if (waited > std::chrono::milliseconds(2)) {
        // a long wait (the others are still computing): stop taking CPU from them
        struct timespec ts{0, waited > std::chrono::milliseconds(50) ? 200000L : 20000L};
        nanosleep(&ts, nullptr);
        continue;
      }
    }
    sched_yield();
  }
  Py_END_ALLOW_THREADS;
  return Py_BuildValue("(il)", status, who);
}

PyObject* set_abort(PyObject*, PyObject* args) {
  unsigned long long header = 0;
  long rank = 0;
  if (!PyArg_ParseTuple(args, "Kl", &header, &rank)) return nullptr;
  int64_t expected = 0;
  abort_word(header)->compare_exchange_strong(expected, static_cast<int64_t>(rank) + 1,
                                              std::memory_order_acq_rel);
  Py_RETURN_NONE;
}

PyObject* set_pid(PyObject*, PyObject* args) {
  unsigned long long ctrl = 0;
  long rank = 0;
  long long pid = 0;
  if (!PyArg_ParseTuple(args, "KlL", &ctrl, &rank, &pid)) return nullptr;
  reinterpret_cast<std::atomic<int64_t>*>(ctrl + static_cast<uintptr_t>(rank) * kLine + 8)
      ->store(pid, std::memory_order_release);
  Py_RETURN_NONE;
}

PyObject* pid_visible(PyObject*, PyObject* args) {
  long long pid = 0;
  if (!PyArg_ParseTuple(args, "L", &pid)) return nullptr;
  const bool visible = pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM);
  return PyBool_FromLong(visible);
}

PyMethodDef methods[] = {
    {"arrive_wait", arrive_wait, METH_VARARGS,
     "arrive_wait(ctrl, header, rank, size, gen, timeout_s, check_pids) -> (status, rank)"},
    {"set_abort", set_abort, METH_VARARGS, "set_abort(header, rank): make every waiter return"},
    {"set_pid", set_pid, METH_VARARGS, "set_pid(ctrl, rank, pid)"},
    {"pid_visible", pid_visible, METH_VARARGS, "pid_visible(pid) -> whether kill(pid, 0) can see it"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_neuron_shm",
                      "torchneuron's cross-process barrier for shared-memory collectives", -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit__neuron_shm() { return PyModule_Create(&module); }
