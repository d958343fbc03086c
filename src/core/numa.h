// NUMA placement for one process on a multi-socket machine (--numa), without libnuma: the
// online nodes and their CPUs from sysfs, the calling thread's memory policy through
// set_mempolicy, thread affinity through sched_setaffinity.
//
// What --numa does with it: the pool's threads are spread over the nodes (contiguous blocks
// of threads per node, in proportion to its CPUs) and pinned there, and the weights are read
// into memory interleaved page by page over every node, so a decode step's reads (each thread
// streams its share of every matrix) draw on all the nodes' memory controllers at once. A
// placement by expert (each expert's pages on the node of the thread that computes it) needs
// a fixed expert-to-node split, which is what expert parallel with one rank per socket gives
// (README: "Many cores and sockets").
#pragma once
#include <string>
#include <vector>

namespace deepinfer::numa {

struct Topology {
  std::vector<int> nodes;               // online node ids
  std::vector<std::vector<int>> cpus;   // the online CPUs of each (same order)
  int size() const { return int(nodes.size()); }
};

// From /sys/devices/system/node (root: another folder, for tests). A machine without it, or
// with one node, is one node holding every CPU this process may run on.
Topology topology(const std::string& root = "/sys/devices/system/node");

// "0-3,8,10-11" -> {0, 1, 2, 3, 8, 10, 11}; throws std::invalid_argument on anything else.
std::vector<int> parse_cpu_list(const std::string& text);

// The CPUs thread t of n runs on: threads in contiguous blocks per node, each node's block
// in proportion to its CPU count (thread 0 on the first node).
const std::vector<int>& cpus_for_thread(const Topology& topo, int t, int n);

// Pins the calling thread to `cpus`; false (and nothing changed) when the kernel refuses.
bool pin_current_thread(const std::vector<int>& cpus);

// While alive, memory the calling thread faults in (page-cache pages of mapped files
// included) is interleaved over the topology's nodes; the previous policy comes back after.
// A no-op on one node, or where set_mempolicy is refused (active() says which).
class InterleaveScope {
 public:
  explicit InterleaveScope(const Topology& topo);
  ~InterleaveScope();
  InterleaveScope(const InterleaveScope&) = delete;
  InterleaveScope& operator=(const InterleaveScope&) = delete;
  bool active() const { return active_; }

 private:
  bool active_ = false;
};

}  // namespace deepinfer::numa
