// NUMA placement (core/numa.h): CPU lists, the topology read from a sysfs-shaped folder,
// threads spread over nodes in proportion to their CPUs, and the no-op paths of one node.
#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "core/numa.h"

using namespace deepinfer;

namespace {

namespace fs = std::filesystem;

struct FakeSysfs {
  fs::path root = fs::temp_directory_path() / ("di-numa-" + std::to_string(::getpid()));
  FakeSysfs() { fs::create_directories(root); }
  ~FakeSysfs() { fs::remove_all(root); }
  void write(const std::string& rel, const std::string& text) {
    fs::create_directories((root / rel).parent_path());
    std::ofstream(root / rel) << text << "\n";
  }
};

std::vector<int> range(int lo, int hi) {
  std::vector<int> v;
  for (int c = lo; c <= hi; ++c) v.push_back(c);
  return v;
}

}  // namespace

TEST(Numa, ParsesCpuLists) {
  EXPECT_EQ(numa::parse_cpu_list("0-3,8,10-11"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(numa::parse_cpu_list("5"), (std::vector<int>{5}));
  EXPECT_EQ(numa::parse_cpu_list(""), std::vector<int>{});
  for (const char* bad : {"a", "3-1", "1-", "-2", "1,,x", "0-9999999"})
    EXPECT_THROW(numa::parse_cpu_list(bad), std::invalid_argument) << bad;
}

// Two nodes of this process's CPUs (a fake sysfs naming the CPUs it may run on, split in two),
// a node without CPUs (memory only) left out.
TEST(Numa, TopologyFromSysfsAndThreadsInProportion) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  std::vector<int> mine;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) mine.push_back(c);
  ASSERT_FALSE(mine.empty());
  FakeSysfs s;
  s.write("online", "0-2");
  const size_t half = (mine.size() + 1) / 2;
  std::string a, b;
  for (size_t i = 0; i < mine.size(); ++i) (i < half ? a : b) += (i % half ? "," : "") + std::to_string(mine[i]);
  s.write("node0/cpulist", a);
  s.write("node1/cpulist", b.empty() ? "" : b);
  s.write("node2/cpulist", "");
  const numa::Topology t = numa::topology(s.root.string());
  ASSERT_EQ(t.size(), b.empty() ? 1 : 2);
  EXPECT_EQ(t.nodes[0], 0);
  EXPECT_EQ(t.cpus[0].size(), half);

  // Proportional blocks on a made-up 3-node machine: 8, 8 and 16 CPUs, 8 threads -> 2, 2, 4.
  numa::Topology m;
  m.nodes = {0, 1, 3};
  m.cpus = {range(0, 7), range(8, 15), range(16, 31)};
  std::vector<int> node_of;
  for (int th = 0; th < 8; ++th) {
    const std::vector<int>& c = numa::cpus_for_thread(m, th, 8);
    node_of.push_back(c.front() < 8 ? 0 : c.front() < 16 ? 1 : 3);
  }
  EXPECT_EQ(node_of, (std::vector<int>{0, 0, 1, 1, 3, 3, 3, 3}));
  // One thread: node 0; more threads than CPUs: still every thread somewhere.
  EXPECT_EQ(numa::cpus_for_thread(m, 0, 1).front(), 0);
  EXPECT_EQ(numa::cpus_for_thread(m, 63, 64).front(), 16);
}

// No sysfs (or a malformed one): one node of every CPU this process may use; interleaving is
// then a no-op, and pinning to the CPUs it has changes nothing.
TEST(Numa, OneNodeFallbackAndNoOps) {
  FakeSysfs s;
  s.write("online", "garbage");
  const numa::Topology t = numa::topology(s.root.string());
  ASSERT_EQ(t.size(), 1);
  EXPECT_FALSE(t.cpus[0].empty());
  const numa::Topology none = numa::topology((s.root / "missing").string());
  EXPECT_EQ(none.size(), 1);
  EXPECT_EQ(none.cpus[0], t.cpus[0]);
  {
    numa::InterleaveScope scope(t);
    EXPECT_FALSE(scope.active());
  }
  EXPECT_TRUE(numa::pin_current_thread(t.cpus[0]));
}
