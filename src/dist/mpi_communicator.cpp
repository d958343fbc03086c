// Communicator over MPI (OpenMPI on Debian). Only built when CMake finds MPI.
#include <mpi.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <thread>
#include <vector>

#include "dist/communicator.h"

namespace deepinfer::dist {
namespace {

using Clock = std::chrono::steady_clock;

int world_rank_for_messages() {
  int r = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

// An MPI error (a peer that vanished, a truncated message) ends the whole job with one line
// naming this rank, instead of leaving the other ranks waiting in a collective.
void on_mpi_error(MPI_Comm* comm, int* code, ...) {
  char text[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  MPI_Error_string(*code, text, &len);
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::fprintf(stderr, "deepinfer: rank %d of %d: MPI error: %s\n", world_rank_for_messages(), size, text);
  std::fflush(stderr);
  MPI_Abort(*comm, 1);
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator() {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
    MPI_Errhandler handler;
    MPI_Comm_create_errhandler(&on_mpi_error, &handler);
    MPI_Comm_set_errhandler(comm_, handler);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, handler);
    MPI_Errhandler_free(&handler);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    if (provided < MPI_THREAD_SERIALIZED)
      abort("this MPI library does not allow calls from more than one thread (MPI_THREAD_SERIALIZED)");
  }
  ~MpiCommunicator() override {
    MPI_Comm_free(&comm_);
    MPI_Finalize();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* name() const override { return "mpi"; }

  void barrier() override {
    const auto t0 = Clock::now();
    MPI_Barrier(comm_);
    account(t0, 0);
  }

  void broadcast(void* data, size_t bytes, int root) override {
    const auto t0 = Clock::now();
    MPI_Bcast(data, to_int(bytes, "broadcast"), MPI_BYTE, root, comm_);
    account(t0, rank_ == root ? 0 : int64_t(bytes));
  }

  void broadcast_idle(void* data, size_t bytes, int root) override {
    MPI_Request req;
    MPI_Ibcast(data, to_int(bytes, "broadcast"), MPI_BYTE, root, comm_, &req);
    // Poll fast for a moment (a step follows the previous one closely while serving), then
    // sleep between polls so that an idle worker leaves its core alone.
    int done = 0;
    for (int spins = 0; !done; ++spins) {
      MPI_Test(&req, &done, MPI_STATUS_IGNORE);
      if (!done && spins > 2000) std::this_thread::sleep_for(std::chrono::microseconds(spins > 20000 ? 1000 : 50));
    }
  }

  void allgatherv(float* data, std::span<const int64_t> counts, std::span<const int64_t> displs) override {
    allgatherv_begin(data, counts, displs);
    allgatherv_end();
  }

  void allgatherv_begin(float* data, std::span<const int64_t> counts, std::span<const int64_t> displs) override {
    if (pending_) abort("allgatherv_begin: the previous allgatherv was not ended");
    if (int(counts.size()) != size_ || int(displs.size()) != size_) abort("allgatherv: counts / displs need one entry per rank");
    counts_.resize(size_t(size_));
    displs_.resize(size_t(size_));
    pending_bytes_ = 0;
    for (int r = 0; r < size_; ++r) {
      counts_[size_t(r)] = to_int(size_t(counts[size_t(r)]), "allgatherv");
      displs_[size_t(r)] = to_int(size_t(displs[size_t(r)]), "allgatherv");
      if (r != rank_) pending_bytes_ += counts[size_t(r)] * int64_t(sizeof(float));
    }
    MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, counts_.data(), displs_.data(), MPI_FLOAT, comm_, &req_);
    pending_ = true;
  }

  void allgatherv_end() override {
    if (!pending_) return;
    // Only the wait is counted: the caller's work since begin overlapped the transfer.
    const auto t0 = Clock::now();
    MPI_Wait(&req_, MPI_STATUS_IGNORE);
    pending_ = false;
    account(t0, pending_bytes_);
  }

  void allgather_bytes(const void* mine, size_t n, void* out) override {
    const auto t0 = Clock::now();
    const int k = to_int(n, "allgather");
    MPI_Allgather(mine, k, MPI_BYTE, out, k, MPI_BYTE, comm_);
    account(t0, int64_t(n) * (size_ - 1));
  }

  [[noreturn]] void abort(const std::string& message) override {
    std::fprintf(stderr, "deepinfer: rank %d of %d: %s\n", rank_, size_, message.c_str());
    std::fflush(stderr);
    MPI_Abort(comm_ == MPI_COMM_NULL ? MPI_COMM_WORLD : comm_, 1);
    std::_Exit(1);
  }

 private:
  int to_int(size_t n, const char* what) {
    if (n > size_t(INT_MAX)) abort(std::string(what) + ": " + std::to_string(n) + " elements exceed MPI's int counts");
    return int(n);
  }
  void account(Clock::time_point t0, int64_t bytes) {
    stats_.seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    stats_.bytes_received += bytes;
    ++stats_.calls;
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  bool pending_ = false;
  MPI_Request req_ = MPI_REQUEST_NULL;
  std::vector<int> counts_, displs_;
  int64_t pending_bytes_ = 0;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_world() { return std::make_unique<MpiCommunicator>(); }

}  // namespace deepinfer::dist
