#include "core/numa.h"

#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace deepinfer::numa {

namespace {

// set_mempolicy's modes (linux/mempolicy.h), spelled here so no libnuma header is needed.
constexpr int kMpolDefault = 0;
constexpr int kMpolInterleave = 3;

std::string read_line(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  if (!f || !std::getline(f, s)) return "";
  return s;
}

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> out;
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) out.push_back(c);
  if (out.empty()) out.push_back(0);
  return out;
}

}  // namespace

std::vector<int> parse_cpu_list(const std::string& text) {
  std::vector<int> out;
  std::stringstream in(text);
  std::string part;
  auto number = [&](const std::string& s) {
    if (s.empty() || s.size() > 6 || !std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); }))
      throw std::invalid_argument("not a CPU list: '" + text + "'");
    return std::stoi(s);
  };
  while (std::getline(in, part, ',')) {
    while (!part.empty() && std::isspace(static_cast<unsigned char>(part.back()))) part.pop_back();
    if (part.empty()) continue;
    const size_t dash = part.find('-');
    const int lo = number(part.substr(0, dash));
    const int hi = dash == std::string::npos ? lo : number(part.substr(dash + 1));
    if (hi < lo) throw std::invalid_argument("not a CPU list: '" + text + "'");
    for (int c = lo; c <= hi; ++c) out.push_back(c);
  }
  return out;
}

Topology topology(const std::string& root) {
  Topology t;
  std::vector<int> nodes;
  try {
    nodes = parse_cpu_list(read_line(root + "/online"));
  } catch (const std::invalid_argument&) {
    nodes.clear();
  }
  const std::vector<int> allowed = allowed_cpus();
  for (int n : nodes) {
    std::vector<int> cpus;
    try {
      cpus = parse_cpu_list(read_line(root + "/node" + std::to_string(n) + "/cpulist"));
    } catch (const std::invalid_argument&) {
      continue;
    }
    // Only the CPUs this process may use (a container's cpuset), and only nodes that have any.
    std::vector<int> mine;
    for (int c : cpus)
      if (std::find(allowed.begin(), allowed.end(), c) != allowed.end()) mine.push_back(c);
    if (mine.empty()) continue;
    t.nodes.push_back(n);
    t.cpus.push_back(std::move(mine));
  }
  if (t.nodes.empty()) {
    t.nodes = {0};
    t.cpus = {allowed};
  }
  return t;
}

const std::vector<int>& cpus_for_thread(const Topology& topo, int t, int n) {
  // Thread t stands at CPU t * total / n of the nodes' CPUs laid end to end: its node's.
  int64_t total = 0;
  for (const auto& c : topo.cpus) total += int64_t(c.size());
  const int64_t at = int64_t(t) * total / std::max(1, n);
  int64_t before = 0;
  for (int k = 0; k < topo.size(); ++k) {
    before += int64_t(topo.cpus[size_t(k)].size());
    if (at < before) return topo.cpus[size_t(k)];
  }
  return topo.cpus.back();
}

bool pin_current_thread(const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus)
    if (c >= 0 && c < CPU_SETSIZE) CPU_SET(c, &set);
  return sched_setaffinity(0, sizeof set, &set) == 0;
}

InterleaveScope::InterleaveScope(const Topology& topo) {
  if (topo.size() < 2) return;
  const int max_node = *std::max_element(topo.nodes.begin(), topo.nodes.end());
  constexpr int kBits = 8 * sizeof(unsigned long);
  std::vector<unsigned long> mask(size_t((max_node + 2 + kBits - 1) / kBits), 0);  // maxnode bits below
  for (int n : topo.nodes) mask[size_t(n / kBits)] |= 1ul << (n % kBits);
  active_ = syscall(SYS_set_mempolicy, kMpolInterleave, mask.data(), (unsigned long)(max_node + 2)) == 0;
}

InterleaveScope::~InterleaveScope() {
  if (active_) syscall(SYS_set_mempolicy, kMpolDefault, nullptr, 0ul);
}

}  // namespace deepinfer::numa
