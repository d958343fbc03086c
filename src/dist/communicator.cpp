#include "dist/communicator.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace deepinfer::dist {

#ifdef DEEPINFER_HAVE_MPI
std::unique_ptr<Communicator> make_mpi_world();  // mpi_communicator.cpp
#endif

void SingleProcess::allgather_bytes(const void* mine, size_t n, void* out) {
  if (n) std::memcpy(out, mine, n);
}

void SingleProcess::abort(const std::string& message) {
  std::fprintf(stderr, "deepinfer: %s\n", message.c_str());
  std::fflush(stderr);
  std::exit(1);
}

void agree(Communicator& comm, const std::string& local_error) {
  const int n = comm.size();
  if (n == 1) {
    if (!local_error.empty()) throw RankError(0, local_error);
    return;
  }
  const int32_t failed = local_error.empty() ? 0 : 1;
  std::vector<int32_t> all(size_t(n), 0);
  comm.allgather_bytes(&failed, sizeof failed, all.data());
  int first = -1;
  for (int r = 0; r < n && first < 0; ++r)
    if (all[size_t(r)]) first = r;
  if (first < 0) return;
  // The failing rank's text, length first (a broadcast needs the size on every rank).
  uint64_t len = comm.rank() == first ? local_error.size() : 0;
  comm.broadcast(&len, sizeof len, first);
  std::string text(size_t(len), '\0');
  if (comm.rank() == first) text = local_error;
  comm.broadcast(text.data(), size_t(len), first);
  throw RankError(first, "rank " + std::to_string(first) + " of " + std::to_string(n) + ": " + text);
}

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"})
    if (const char* s = std::getenv(v); s && *s) return true;
  return false;
}

bool have_mpi() {
#ifdef DEEPINFER_HAVE_MPI
  return true;
#else
  return false;
#endif
}

std::unique_ptr<Communicator> make_world() {
  if (!launched_by_mpi()) return std::make_unique<SingleProcess>();
#ifdef DEEPINFER_HAVE_MPI
  return make_mpi_world();
#else
  // One rank of one is harmless; more would each run the whole job alone.
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  if (!size) size = std::getenv("PMI_SIZE");
  if (size && std::atoi(size) > 1)
    throw std::runtime_error("started by an MPI launcher with " + std::string(size) +
                             " ranks, but this build has no MPI (install OpenMPI and rebuild)");
  return std::make_unique<SingleProcess>();
#endif
}

}  // namespace deepinfer::dist
