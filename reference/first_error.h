// An exception must not leave an OpenMP parallel region (it would call std::terminate and take the
// Python process with it). Each iteration runs through FirstError::run; the first exception is kept
// and rethrown by rethrow() after the region, on the calling thread.
#pragma once
#include <exception>
#include <mutex>

namespace moenum::reference {

class FirstError {
 public:
  template <class F>
  void run(F&& body) noexcept {
    try {
      body();
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
  }
  void rethrow() const {
    if (error_) std::rethrow_exception(error_);
  }

 private:
  std::mutex mutex_;
  std::exception_ptr error_;
};

}  // namespace moenum::reference
