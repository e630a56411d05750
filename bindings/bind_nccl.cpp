// The nccl transport's data plane (moenum.ep.transport): an NCCL communicator from a unique id that
// rank 0 broadcasts over MPI (as nccl-tests does), and an all-to-all of bytes as grouped
// ncclSend/ncclRecv on this rank's GPU. The communicator is non-blocking, so every wait is polled
// against a deadline; on an error or a timeout it is aborted and the caller stops the run.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <memory>
#include <stdexcept>

#include "binding_registry.h"

#if defined(MOENUM_HAVE_NCCL)
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#endif

namespace py = pybind11;

namespace moenum::bindings {
namespace {

#if defined(MOENUM_HAVE_NCCL)

void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

class NcclComm {
 public:
  NcclComm(const py::bytes& unique_id, int size, int rank, int local_rank, double timeout_s) : timeout_s_(timeout_s) {
    const std::string id_bytes = unique_id;
    if (id_bytes.size() != sizeof(ncclUniqueId)) throw std::runtime_error("NCCL unique id has the wrong size");
    ncclUniqueId id;
    std::memcpy(&id, id_bytes.data(), sizeof id);
    int devices = 0;
    cuda_check(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
    if (devices < 1) throw std::runtime_error("transport nccl: no CUDA device on this rank");
    device_ = local_rank % devices;
    cuda_check(cudaSetDevice(device_), "cudaSetDevice");
    cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    nccl_check(ncclCommInitRankConfig(&comm_, size, id, rank, &config), "ncclCommInitRank");
    wait_comm("ncclCommInitRank");
    size_ = size;
  }
  ~NcclComm() {
    if (comm_) ncclCommDestroy(comm_);
    if (stream_) cudaStreamDestroy(stream_);
  }
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  py::array_t<uint8_t> alltoallv(const py::array_t<uint8_t, py::array::c_style>& send,
                                 const py::array_t<int64_t, py::array::c_style>& send_counts,
                                 const py::array_t<int64_t, py::array::c_style>& recv_counts) {
    if (send_counts.size() != size_ || recv_counts.size() != size_) throw std::runtime_error("alltoallv: one count per rank");
    int64_t send_total = 0, recv_total = 0;
    for (int p = 0; p < size_; ++p) send_total += send_counts.data()[p], recv_total += recv_counts.data()[p];
    if (send_total != send.size()) throw std::runtime_error("alltoallv: send counts do not add up");
    py::array_t<uint8_t> recv(recv_total);
    {
      py::gil_scoped_release release;
      cuda_check(cudaSetDevice(device_), "cudaSetDevice");
      uint8_t *d_send = nullptr, *d_recv = nullptr;
      cuda_check(cudaMalloc(&d_send, std::max<int64_t>(send_total, 1)), "cudaMalloc");
      cuda_check(cudaMalloc(&d_recv, std::max<int64_t>(recv_total, 1)), "cudaMalloc");
      try {
        if (send_total) cuda_check(cudaMemcpyAsync(d_send, send.data(), send_total, cudaMemcpyHostToDevice, stream_), "cudaMemcpy");
        nccl_check(ncclGroupStart(), "ncclGroupStart");
        int64_t so = 0, ro = 0;
        for (int p = 0; p < size_; ++p) {
          const int64_t sc = send_counts.data()[p], rc = recv_counts.data()[p];
          if (sc) nccl_check(ncclSend(d_send + so, size_t(sc), ncclUint8, p, comm_, stream_), "ncclSend");
          if (rc) nccl_check(ncclRecv(d_recv + ro, size_t(rc), ncclUint8, p, comm_, stream_), "ncclRecv");
          so += sc, ro += rc;
        }
        nccl_check(ncclGroupEnd(), "ncclGroupEnd");
        wait_comm("ncclSend/ncclRecv");
        wait_stream("the all-to-all");
        if (recv_total) cuda_check(cudaMemcpy(recv.mutable_data(), d_recv, recv_total, cudaMemcpyDeviceToHost), "cudaMemcpy");
      } catch (...) {
        cudaFree(d_send);
        cudaFree(d_recv);
        throw;
      }
      cudaFree(d_send);
      cudaFree(d_recv);
    }
    return recv;
  }

 private:
  void nccl_check(ncclResult_t r, const char* what) {
    if (r == ncclSuccess || r == ncclInProgress) return;
    fail(std::string(what) + ": " + ncclGetErrorString(r));
  }
  [[noreturn]] void fail(const std::string& what) {
    if (comm_) ncclCommAbort(comm_);
    comm_ = nullptr;
    throw std::runtime_error(what);
  }
  double elapsed_s(std::chrono::steady_clock::time_point t0) const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  void wait_comm(const char* what) {
    const auto t0 = std::chrono::steady_clock::now();
    ncclResult_t state = ncclInProgress;
    while (true) {
      nccl_check(ncclCommGetAsyncError(comm_, &state), "ncclCommGetAsyncError");
      if (state != ncclInProgress) break;
      if (elapsed_s(t0) > timeout_s_) fail(std::string(what) + ": NCCL timed out");
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    nccl_check(state, what);
  }
  void wait_stream(const char* what) {
    const auto t0 = std::chrono::steady_clock::now();
    while (true) {
      const cudaError_t e = cudaStreamQuery(stream_);
      if (e == cudaSuccess) return;
      if (e != cudaErrorNotReady) fail(std::string(what) + ": " + cudaGetErrorString(e));
      ncclResult_t state = ncclSuccess;
      ncclCommGetAsyncError(comm_, &state);
      if (state != ncclSuccess && state != ncclInProgress) fail(std::string(what) + ": " + ncclGetErrorString(state));
      if (elapsed_s(t0) > timeout_s_) fail(std::string(what) + ": NCCL timed out");
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  int device_ = 0, size_ = 0;
  double timeout_s_;
};

void bind(py::module_& m) {
  m.attr("built_with_nccl") = true;
  m.def("nccl_unique_id", [] {
    ncclUniqueId id;
    const ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) throw std::runtime_error(std::string("ncclGetUniqueId: ") + ncclGetErrorString(r));
    return py::bytes(reinterpret_cast<const char*>(&id), sizeof id);
  }, "A new NCCL unique id (rank 0 makes it and broadcasts it over MPI)");
  // Private class, public factory: every build has the same public names (the stubs list them).
  py::class_<NcclComm>(m, "_NcclComm", "An NCCL communicator on this rank's GPU (local rank mod device count)")
      .def("alltoallv", &NcclComm::alltoallv, py::arg("send"), py::arg("send_counts"), py::arg("recv_counts"),
           "Bytes send[offsets[p]:][:send_counts[p]] to rank p, grouped ncclSend/ncclRecv; returns what arrived");
  m.def("nccl_comm", [](const py::bytes& uid, int size, int rank, int local_rank, double timeout_s) {
    return std::make_unique<NcclComm>(uid, size, rank, local_rank, timeout_s);
  }, py::arg("unique_id"), py::arg("size"), py::arg("rank"), py::arg("local_rank"), py::arg("timeout_s"),
  "This rank's NCCL communicator, from rank 0's unique id, on its GPU (local rank mod device count)");
}

#else

[[noreturn]] void no_nccl() { throw std::runtime_error("this moenum was built without CUDA and NCCL"); }

void bind(py::module_& m) {
  m.attr("built_with_nccl") = false;
  m.def("nccl_unique_id", []() -> py::bytes { no_nccl(); }, "Unavailable: built without NCCL");
  m.def("nccl_comm", [](const py::bytes&, int, int, int, double) -> py::none { no_nccl(); },
        py::arg("unique_id"), py::arg("size"), py::arg("rank"), py::arg("local_rank"), py::arg("timeout_s"),
        "Unavailable: built without NCCL");
}

#endif

BindRegistrar registrar(bind);

}  // namespace
}  // namespace moenum::bindings
