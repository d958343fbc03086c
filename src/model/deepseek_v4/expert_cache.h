// Routed experts streamed from disk, for a checkpoint larger than the memory it may use
// (--memory-limit). The dense weights stay mapped and resident; each routed expert (its three
// matrices and their scales) is read whole, in large reads on reader threads, into one slot of
// a fixed pool, and evicted least recently used. The kernels multiply a byte-exact copy of the
// checkpoint's bytes, so every output keeps its bits; the mapped pages of a streamed expert
// are never touched (no 4 KiB faults on the compute threads).
//
// Reads are asked for ahead of need (read_ahead): the hash-routed layers' experts follow from
// the token ids, the other layers' from the next layer's gate applied to the current layer's
// input (predict). A step pins its experts (Step) and computes them in the order they arrive.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "loader/safetensors.h"
#include "model/deepseek_v4/weights.h"

namespace deepinfer::v4 {

struct ExpertCacheStats {
  uint64_t lookups = 0;          // experts the steps ran
  uint64_t hits = 0;             // of those, resident when the step asked
  uint64_t reads = 0;            // experts read from disk
  uint64_t bytes_read = 0;
  double read_seconds = 0;       // summed over the reader threads
  uint64_t read_ahead = 0;       // reads asked for ahead of need
  uint64_t read_ahead_unused = 0;  // evicted before a step used them
  uint64_t predicted = 0;        // experts predicted for gate-routed layers
  uint64_t predicted_chosen = 0; // of those, chosen there
  uint64_t chosen_predicted_layers = 0;  // experts chosen in layers that had a prediction
  double wait_seconds = 0;       // steps waiting for reads
  double read_busy_seconds = 0;  // wall time with at least one read in flight
};

// The bytes of weights a process may keep in memory: memory_limit (0: what it may use now,
// available_memory(): MemAvailable or the cgroup's limit) less reserve (the KV pool and
// working memory the caller will allocate). strict: the limit was given (--memory-limit).
struct WeightBudget {
  int64_t bytes = 0;
  bool strict = false;
  std::string source;
};
WeightBudget weight_budget(int64_t memory_limit, int64_t reserve);
// Working memory (activations, scratch) reserved besides the weights and the KV pool.
constexpr int64_t kWorkingMemoryReserve = int64_t(1) << 30;

class ExpertCache {
 public:
  // A MoE layer whose routed experts stream, and the layer that runs after it in the same
  // forward (null: none), whose experts this layer's input predicts.
  struct Layer {
    const MoeWeights* moe = nullptr;
    const MoeWeights* next = nullptr;
  };
  // Bytes one slot takes for these layers' experts (page-aligned reads included).
  static int64_t slot_bytes_for(const TensorStore& store, const std::vector<Layer>& layers);
  // As many slots as budget_bytes holds (at least one); `readers` reader threads. Throws
  // LoadError when an expert's tensors are not in the store's mapped shards.
  ExpertCache(const TensorStore& store, const std::vector<Layer>& layers, int64_t budget_bytes, int readers);
  ~ExpertCache();
  ExpertCache(const ExpertCache&) = delete;
  ExpertCache& operator=(const ExpertCache&) = delete;

  int64_t slot_bytes() const { return slot_bytes_; }
  int64_t slots() const { return n_slots_; }
  int64_t experts() const { return n_experts_; }
  // Whether this layer's experts stream (false: bound as mapped, used in place).
  bool streams(const MoeWeights* layer) const { return layer_index_.count(layer) != 0; }
  const MoeWeights* next_of(const MoeWeights* layer) const;
  ExpertCacheStats stats() const;
  void reset_stats();

  // Reads these experts of layer ahead of need (behind every read a step waits for); the
  // resident and queued ones are left alone. Never waits.
  void read_ahead(const MoeWeights* layer, std::span<const int32_t> experts);
  // read_ahead, remembered as the layer's prediction (counted against its choice).
  void predict(const MoeWeights* layer, std::span<const int32_t> experts);

  // The experts one MoE step runs (ascending, distinct), pinned from construction until
  // release() or destruction: no read evicts them.
  class Step {
   public:
    Step(ExpertCache& cache, const MoeWeights* layer, std::span<const int32_t> experts);
    ~Step();
    Step(const Step&) = delete;
    Step& operator=(const Step&) = delete;
    // Waits until at least one expert not handed out yet is resident, then appends every
    // such one (its index into experts) to ready. False once all were handed out. Throws
    // std::runtime_error naming the file and the expert when a read failed.
    bool next(std::vector<int32_t>& ready);
    // The resident copy of experts[index] (valid until release(index)).
    const ExpertWeights& weights(int32_t index) const { return copies_[size_t(index)]; }
    void release(int32_t index);

   private:
    ExpertCache& c_;
    int layer_;
    std::vector<int32_t> experts_;
    std::vector<ExpertWeights> copies_;
    std::vector<uint8_t> state_;  // 0 waiting, 1 handed out, 2 released
    size_t left_;
  };

 private:
  struct Span {          // one read: bytes [file_off, file_off + len) into slot + slot_off
    int file = 0;
    uint64_t file_off = 0, len = 0, need = 0;  // need: bytes that must exist (the rest pads to pages)
    uint64_t slot_off = 0;
  };
  struct Part {          // where a matrix's codes or scales lie in the slot
    uint64_t slot_off = 0;
  };
  struct Layout {
    std::vector<Span> spans;
    Part parts[6];       // w1, w1 scale, w2, w2 scale, w3, w3 scale
  };
  enum State : uint8_t { kAbsent, kQueued, kLoading, kResident, kFailed };
  struct Entry {
    State state = kAbsent;
    bool wanted = false;       // a step waits for it
    bool ahead_unused = false; // read ahead, not used yet
    int32_t slot = -1;
    int32_t pins = 0;
    uint64_t last_use = 0;
    std::string error;
  };
  struct Key {
    int32_t layer, expert;
  };

  Entry& entry(int layer, int32_t e) { return entries_[size_t(layer)][size_t(e)]; }
  ExpertWeights copy_in_slot(int layer, int32_t e, int32_t slot) const;
  void queue_locked(int layer, int32_t e, bool wanted);
  // A free slot, or the least recently used unpinned resident one (evicted); -1 if none.
  int32_t take_slot_locked();
  void reader_loop();
  // Reads expert (layer, e) into slot; "" or the error.
  std::string read_expert(int layer, int32_t e, int32_t slot);

  std::vector<const MoeWeights*> layers_;
  std::vector<const MoeWeights*> next_;
  std::unordered_map<const MoeWeights*, int> layer_index_;
  std::vector<std::vector<Layout>> layouts_;
  std::vector<std::string> paths_;
  std::vector<int> direct_fds_;    // O_DIRECT (-1 where refused)
  std::vector<int> buffered_fds_;
  int64_t slot_bytes_ = 0, n_slots_ = 0, n_experts_ = 0;
  uint8_t* arena_ = nullptr;  // the slots, in map_ from its first 2 MiB boundary
  size_t arena_bytes_ = 0;
  uint8_t* map_ = nullptr;
  size_t map_bytes_ = 0;

  mutable std::mutex mu_;
  std::condition_variable work_cv_;   // readers: a read was queued, or a slot freed
  std::condition_variable done_cv_;   // steps: a read finished
  std::vector<std::vector<Entry>> entries_;
  std::vector<Key> slot_owner_;       // layer -1: free
  std::vector<int32_t> free_slots_;
  std::deque<Key> wanted_q_, ahead_q_;
  std::vector<std::vector<int32_t>> predicted_;  // per layer, the last prediction (ascending)
  uint64_t tick_ = 0;
  int in_flight_ = 0;
  std::chrono::steady_clock::time_point busy_since_;
  bool stop_ = false;
  ExpertCacheStats stats_;
  std::vector<std::thread> readers_;
};

}  // namespace deepinfer::v4
