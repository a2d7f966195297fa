// File: cupti_hook/record_sink.h
//
// Where the tracer's records go: the session segment's record ring, or (in
// standalone mode) an in-process collector. Write never blocks; false means
// the record was dropped (and the sink counted it).
//
// ActiveGate guards a resource that callbacks on other threads may be using
// when teardown wants to release it (the segment mapping above all):
//
//   if (!gate.Enter()) return;          // closed: fall through
//   ... use the segment ...
//   gate.Exit();
//
//   gate.CloseAndWait();                // teardown: no user left after this
#ifndef CUPROBE_CUPTI_HOOK_RECORD_SINK_H_
#define CUPROBE_CUPTI_HOOK_RECORD_SINK_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

namespace cuprobe {

class RecordSink {
 public:
  virtual ~RecordSink() = default;
  virtual bool Write(uint16_t type, const void* body, uint32_t body_size,
                     const void* extra = nullptr, uint32_t extra_size = 0) = 0;
};

// Enter (users_ up, then open_ read) and CloseAndWait (open_ cleared, then
// users_ read) each write one word and read the other: with acquire/release
// alone both could miss the other's write (a store may wait in a store
// buffer while the later load goes ahead), and a user would enter a gate
// its closer saw empty. Sequentially consistent operations on both sides
// forbid that. On x86 Enter's cost is unchanged (the locked add orders it
// anyway); CloseAndWait's store becomes an xchg, once per teardown.
class ActiveGate {
 public:
  [[nodiscard]] bool Enter() {
    users_.fetch_add(1, std::memory_order_seq_cst);
    if (!open_.load(std::memory_order_seq_cst)) {
      users_.fetch_sub(1, std::memory_order_acq_rel);
      return false;
    }
    return true;
  }
  void Exit() { users_.fetch_sub(1, std::memory_order_acq_rel); }

  // Closes the gate and waits (up to `timeout`) for users inside to leave.
  // Returns false if some user is still inside after the timeout; the caller
  // must then leak the resource rather than release it.
  bool CloseAndWait(std::chrono::milliseconds timeout = std::chrono::milliseconds(2000)) {
    open_.store(false, std::memory_order_seq_cst);
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (users_.load(std::memory_order_seq_cst) != 0) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::yield();
    }
    return true;
  }
  [[nodiscard]] bool open() const { return open_.load(std::memory_order_acquire); }
  [[nodiscard]] int users() const { return users_.load(std::memory_order_acquire); }

 private:
  std::atomic<bool> open_{true};
  std::atomic<int> users_{0};
};

// Enter/Exit as a scope.
class GateScope {
 public:
  explicit GateScope(ActiveGate& gate) : gate_(gate), entered_(gate.Enter()) {}
  ~GateScope() {
    if (entered_) gate_.Exit();
  }
  GateScope(const GateScope&) = delete;
  GateScope& operator=(const GateScope&) = delete;
  [[nodiscard]] bool entered() const { return entered_; }

 private:
  ActiveGate& gate_;
  bool entered_;
};

}  // namespace cuprobe

#endif  // CUPROBE_CUPTI_HOOK_RECORD_SINK_H_
