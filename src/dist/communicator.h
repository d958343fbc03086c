// The collectives the model's parallel layers and the engine's step broadcast use, behind one
// small interface: an MPI implementation (mpi_communicator.cpp, built when CMake finds MPI)
// and a single-process one, so another transport (NCCL on GPUs) can back it later. Knows
// nothing of requests, tensors or HTTP.
//
// Every collective must be called by every rank in the same order (the MPI rule). Calls come
// from one thread at a time (MPI_THREAD_SERIALIZED).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>

namespace deepinfer::dist {

// Time spent inside collectives and the payload bytes they moved into this rank (what the
// link carries; zero for one process).
struct CommStats {
  double seconds = 0.0;
  int64_t bytes_received = 0;
  int64_t calls = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char* name() const = 0;

  virtual void barrier() = 0;
  // data[0..bytes) of `root` lands in every rank's data.
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  // The same for a rank that may wait long (an idle server worker waiting for the next step):
  // it sleeps between polls instead of spinning a core.
  virtual void broadcast_idle(void* data, size_t bytes, int root) { broadcast(data, bytes, root); }
  // Rank r's block data[displs[r] .. displs[r] + counts[r]) (already in place on rank r)
  // lands at the same place on every rank. counts / displs have size() entries, in floats.
  virtual void allgatherv(float* data, std::span<const int64_t> counts, std::span<const int64_t> displs) = 0;
  // The same split in two, so the caller can compute between them (the shared expert while
  // the routed experts' outputs travel). At most one outstanding; data must stay alive.
  virtual void allgatherv_begin(float* data, std::span<const int64_t> counts, std::span<const int64_t> displs) {
    allgatherv(data, counts, displs);
  }
  virtual void allgatherv_end() {}
  // out[r * n .. (r + 1) * n) = rank r's mine[0..n), on every rank.
  virtual void allgather_bytes(const void* mine, size_t n, void* out) = 0;
  // Prints "deepinfer: rank R of N: message" and ends every rank of the job, exit code 1.
  [[noreturn]] virtual void abort(const std::string& message) = 0;

  const CommStats& stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }

 protected:
  CommStats stats_;
};

// One process: every collective is a no-op (its own block is already in place).
class SingleProcess final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const char* name() const override { return "single"; }
  void barrier() override {}
  void broadcast(void*, size_t, int) override {}
  void allgatherv(float*, std::span<const int64_t>, std::span<const int64_t>) override {}
  void allgather_bytes(const void* mine, size_t n, void* out) override;
  [[noreturn]] void abort(const std::string& message) override;
};

// A failure every rank knows about (agree() raised it on all of them with the same text).
// The CLI prints it once, on rank 0, and every rank exits with 1.
struct RankError : std::runtime_error {
  RankError(int rank, const std::string& what) : std::runtime_error(what), failed_rank(rank) {}
  int failed_rank;
};

// Collective: every rank passes "" (fine) or its error. If any rank failed, every rank throws
// RankError "rank R of N: <R's error>" for the lowest such R; else returns on every rank.
void agree(Communicator& comm, const std::string& local_error);

// True if the process was started by an MPI launcher (mpirun / srun set these variables).
bool launched_by_mpi();
// True if this build links MPI.
bool have_mpi();

// The job's communicator: MPI when launched by mpirun and built with MPI, else one process.
// An MPI launch of a build without MPI throws (N copies would each run alone). The MPI
// communicator finalizes MPI when destroyed.
std::unique_ptr<Communicator> make_world();

}  // namespace deepinfer::dist
