#include "model/deepseek_v4/expert_cache.h"

#include "model/deepseek_v4/synthetic.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>

namespace deepinfer::v4 {

namespace {

constexpr uint64_t kPage = 4096;      // O_DIRECT wants file offsets, lengths and buffers on it
constexpr uint64_t kMergeGap = 1 << 20;  // tensors closer than this are read in one go
constexpr uint64_t kReadPiece = 4 << 20;

uint64_t align_down(uint64_t v) { return v / kPage * kPage; }
uint64_t align_up(uint64_t v) { return (v + kPage - 1) / kPage * kPage; }

// The six byte ranges of an expert, in Layout::parts order.
struct Piece {
  const uint8_t* data;
  uint64_t bytes;
};
void pieces_of(const ExpertWeights& w, Piece out[6]) {
  const WeightMatrix* m[3] = {&w.w1, &w.w2, &w.w3};
  for (int i = 0; i < 3; ++i) {
    out[2 * i] = {m[i]->data, uint64_t(weight_data_bytes(*m[i]))};
    out[2 * i + 1] = {m[i]->scale, uint64_t(weight_scale_bytes(*m[i]))};
  }
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

// ------------------------------------------------------------------------------ layout

namespace {

struct Located {
  int piece;
  size_t file;
  uint64_t off, bytes;
};

// Where an expert's pieces lie and how they are read: sorted by file and offset, merged
// where close, each read page-aligned at both ends, laid out in the slot one after another.
template <class Layout, class Span>
Layout layout_expert(const TensorStore& store, const ExpertWeights& w, const std::string& what) {
  Piece pieces[6];
  pieces_of(w, pieces);
  std::vector<Located> loc;
  for (int i = 0; i < 6; ++i) {
    if (!pieces[i].data || pieces[i].bytes == 0) continue;
    Located l{i, 0, 0, pieces[i].bytes};
    if (!store.locate(pieces[i].data, size_t(pieces[i].bytes), &l.file, &l.off))
      throw LoadError(what + ": its tensors are not in a mapped shard, so it cannot be streamed from disk");
    loc.push_back(l);
  }
  std::sort(loc.begin(), loc.end(), [](const Located& a, const Located& b) {
    return a.file != b.file ? a.file < b.file : a.off < b.off;
  });
  Layout layout;
  uint64_t slot_off = 0;
  size_t i = 0;
  while (i < loc.size()) {
    size_t j = i + 1;
    uint64_t end = loc[i].off + loc[i].bytes;
    while (j < loc.size() && loc[j].file == loc[i].file && loc[j].off <= end + kMergeGap) {
      end = std::max(end, loc[j].off + loc[j].bytes);
      ++j;
    }
    Span s;
    s.file = int(loc[i].file);
    s.file_off = align_down(loc[i].off);
    s.len = align_up(end) - s.file_off;
    s.need = end - s.file_off;
    s.slot_off = slot_off;
    for (size_t k = i; k < j; ++k) layout.parts[loc[k].piece].slot_off = slot_off + (loc[k].off - s.file_off);
    slot_off += s.len;
    layout.spans.push_back(s);
    i = j;
  }
  return layout;
}

std::string expert_name(size_t layer, size_t e) {
  return "routed expert " + std::to_string(e) + " of MoE layer " + std::to_string(layer);
}

}  // namespace

WeightBudget weight_budget(int64_t memory_limit, int64_t reserve) {
  WeightBudget b;
  b.strict = memory_limit > 0;
  if (b.strict) {
    b.bytes = memory_limit;
    b.source = "--memory-limit";
  } else {
    const MemoryBudget m = available_memory();
    b.bytes = int64_t(m.bytes);
    b.source = m.source;
  }
  b.bytes -= reserve;
  b.source += " less " + std::to_string(reserve) + " bytes of KV pool and working memory";
  return b;
}

int64_t ExpertCache::slot_bytes_for(const TensorStore& store, const std::vector<Layer>& layers) {
  int64_t most = 0;
  for (size_t l = 0; l < layers.size(); ++l)
    for (size_t e = 0; e < layers[l].moe->experts.size(); ++e) {
      const Layout layout =
          layout_expert<Layout, Span>(store, layers[l].moe->experts[e], expert_name(l, e));
      int64_t bytes = 0;
      for (const Span& s : layout.spans) bytes += int64_t(s.len);
      most = std::max(most, bytes);
    }
  return most;
}

ExpertCache::ExpertCache(const TensorStore& store, const std::vector<Layer>& layers, int64_t budget_bytes,
                         int readers) {
  paths_ = store.shard_paths();
  for (size_t l = 0; l < layers.size(); ++l) {
    layer_index_[layers[l].moe] = int(l);
    layers_.push_back(layers[l].moe);
    next_.push_back(layers[l].next);
    std::vector<Layout> ls;
    for (size_t e = 0; e < layers[l].moe->experts.size(); ++e) {
      ls.push_back(layout_expert<Layout, Span>(store, layers[l].moe->experts[e],
                                               expert_name(l, e)));
      int64_t bytes = 0;
      for (const Span& s : ls.back().spans) bytes += int64_t(s.len);
      slot_bytes_ = std::max(slot_bytes_, bytes);
    }
    n_experts_ += int64_t(ls.size());
    layouts_.push_back(std::move(ls));
    entries_.emplace_back(layers[l].moe->experts.size());
    predicted_.emplace_back();
  }
  slot_bytes_ = int64_t(align_up(uint64_t(std::max<int64_t>(slot_bytes_, 1))));
  // Large experts get whole 2 MiB pages (the kernels stream them: a 4 KiB page a TLB miss
  // otherwise), at most one page of padding in eight.
  constexpr int64_t kHuge = int64_t(2) << 20;
  if (slot_bytes_ >= 8 * kHuge) slot_bytes_ = (slot_bytes_ + kHuge - 1) / kHuge * kHuge;
  n_slots_ = std::max<int64_t>(1, std::min<int64_t>(budget_bytes / slot_bytes_, n_experts_));
  arena_bytes_ = size_t(n_slots_ * slot_bytes_);
  // One 2 MiB page more, so that the slots can start on a huge-page boundary.
  map_bytes_ = arena_bytes_ + size_t(kHuge);
  void* p = ::mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    throw LoadError("the routed-expert cache cannot allocate " + std::to_string(arena_bytes_) + " bytes: " +
                    std::strerror(errno));
  map_ = static_cast<uint8_t*>(p);
  arena_ = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(p) + uintptr_t(kHuge) - 1) & ~uintptr_t(kHuge - 1));
#ifdef MADV_HUGEPAGE
  if (arena_bytes_ >= size_t(kHuge)) ::madvise(arena_, arena_bytes_, MADV_HUGEPAGE);  // advice only
#endif
  slot_owner_.assign(size_t(n_slots_), Key{-1, -1});
  for (int64_t s = n_slots_ - 1; s >= 0; --s) free_slots_.push_back(int32_t(s));
  for (const std::string& path : paths_) {
    // O_DIRECT: whole experts straight from the disk into the slot, not a second copy in the
    // page cache (file systems without it, tmpfs, fall back to buffered reads).
    direct_fds_.push_back(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT));
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      const std::string err = std::strerror(errno);
      for (int f : direct_fds_) if (f >= 0) ::close(f);
      for (int f : buffered_fds_) ::close(f);
      ::munmap(map_, map_bytes_);
      throw LoadError(path + ": cannot open for the routed-expert reads: " + err);
    }
    buffered_fds_.push_back(fd);
  }
  for (int i = 0; i < std::max(1, readers); ++i) readers_.emplace_back([this] { reader_loop(); });
}

ExpertCache::~ExpertCache() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& t : readers_) t.join();
  for (int f : direct_fds_)
    if (f >= 0) ::close(f);
  for (int f : buffered_fds_) ::close(f);
  if (map_) ::munmap(map_, map_bytes_);
}

const MoeWeights* ExpertCache::next_of(const MoeWeights* layer) const {
  auto it = layer_index_.find(layer);
  return it == layer_index_.end() ? nullptr : next_[size_t(it->second)];
}

ExpertCacheStats ExpertCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void ExpertCache::reset_stats() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_ = ExpertCacheStats{};
}

ExpertWeights ExpertCache::copy_in_slot(int layer, int32_t e, int32_t slot) const {
  ExpertWeights w = layers_[size_t(layer)]->experts[size_t(e)];
  const Layout& layout = layouts_[size_t(layer)][size_t(e)];
  uint8_t* base = arena_ + size_t(slot) * size_t(slot_bytes_);
  WeightMatrix* m[3] = {&w.w1, &w.w2, &w.w3};
  for (int i = 0; i < 3; ++i) {
    if (m[i]->data) m[i]->data = base + layout.parts[2 * i].slot_off;
    if (m[i]->scale) m[i]->scale = base + layout.parts[2 * i + 1].slot_off;
  }
  return w;
}

// ------------------------------------------------------------------------------ queueing

void ExpertCache::queue_locked(int layer, int32_t e, bool wanted) {
  Entry& en = entry(layer, e);
  if (wanted) en.wanted = true;
  if (en.state == kAbsent || en.state == kFailed) {
    en.state = kQueued;
    en.error.clear();
    (wanted ? wanted_q_ : ahead_q_).push_back(Key{layer, e});
  } else if (en.state == kQueued && wanted) {
    wanted_q_.push_back(Key{layer, e});  // moves ahead of the reads ahead; the stale copy is skipped
  }
}

void ExpertCache::read_ahead(const MoeWeights* layer, std::span<const int32_t> experts) {
  auto it = layer_index_.find(layer);
  if (it == layer_index_.end()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int32_t e : experts)
      if (e >= 0 && size_t(e) < entries_[size_t(it->second)].size()) queue_locked(it->second, e, false);
  }
  work_cv_.notify_all();
}

void ExpertCache::predict(const MoeWeights* layer, std::span<const int32_t> experts) {
  auto it = layer_index_.find(layer);
  if (it == layer_index_.end()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<int32_t>& p = predicted_[size_t(it->second)];
    p.assign(experts.begin(), experts.end());
    std::sort(p.begin(), p.end());
    p.erase(std::unique(p.begin(), p.end()), p.end());
  }
  read_ahead(layer, experts);
}

int32_t ExpertCache::take_slot_locked() {
  if (!free_slots_.empty()) {
    const int32_t s = free_slots_.back();
    free_slots_.pop_back();
    return s;
  }
  int32_t best = -1;
  uint64_t best_use = ~uint64_t(0);
  for (int32_t s = 0; s < int32_t(n_slots_); ++s) {
    const Key k = slot_owner_[size_t(s)];
    if (k.layer < 0) continue;
    const Entry& en = entry(k.layer, k.expert);
    if (en.state == kResident && en.pins == 0 && en.last_use < best_use) {
      best = s;
      best_use = en.last_use;
    }
  }
  if (best < 0) return -1;
  const Key k = slot_owner_[size_t(best)];
  Entry& en = entry(k.layer, k.expert);
  if (en.ahead_unused) ++stats_.read_ahead_unused;
  en = Entry{};
  slot_owner_[size_t(best)] = Key{-1, -1};
  return best;
}

void ExpertCache::reader_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (stop_) return;
    // Wanted reads first; stale queue items (read meanwhile, or bumped to the wanted queue)
    // are dropped. A read ahead never waits for a slot: it is dropped when none is free.
    Key k{-1, -1};
    bool ahead = false;
    while (!wanted_q_.empty() && k.layer < 0) {
      const Key c = wanted_q_.front();
      if (entry(c.layer, c.expert).state == kQueued)
        k = c;
      else
        wanted_q_.pop_front();
    }
    while (k.layer < 0 && !ahead_q_.empty()) {
      const Key c = ahead_q_.front();
      ahead_q_.pop_front();
      const Entry& en = entry(c.layer, c.expert);
      if (en.state == kQueued && !en.wanted) {
        k = c;
        ahead = true;
      }
    }
    if (k.layer < 0) {
      work_cv_.wait(lock);
      continue;
    }
    const int32_t slot = take_slot_locked();
    if (slot < 0) {
      if (ahead) {
        entry(k.layer, k.expert).state = kAbsent;  // no room now: dropped
        continue;
      }
      work_cv_.wait(lock);  // every slot pinned: wait for a step to release one
      continue;
    }
    if (!ahead) wanted_q_.pop_front();
    Entry& en = entry(k.layer, k.expert);
    en.state = kLoading;
    en.slot = slot;
    slot_owner_[size_t(slot)] = k;
    const auto t0 = std::chrono::steady_clock::now();
    if (in_flight_++ == 0) busy_since_ = t0;
    lock.unlock();
    const std::string error = read_expert(k.layer, k.expert, slot);
    const auto t1 = std::chrono::steady_clock::now();
    lock.lock();
    if (--in_flight_ == 0) stats_.read_busy_seconds += std::chrono::duration<double>(t1 - busy_since_).count();
    Entry& done = entry(k.layer, k.expert);
    stats_.read_seconds += std::chrono::duration<double>(t1 - t0).count();
    if (error.empty()) {
      done.state = kResident;
      done.last_use = ++tick_;
      done.ahead_unused = !done.wanted;
      ++stats_.reads;
      if (ahead) ++stats_.read_ahead;
      for (const Span& s : layouts_[size_t(k.layer)][size_t(k.expert)].spans) stats_.bytes_read += s.len;
    } else {
      done.state = kFailed;
      done.error = error;
      done.slot = -1;
      slot_owner_[size_t(slot)] = Key{-1, -1};
      free_slots_.push_back(slot);
    }
    done_cv_.notify_all();
  }
}

std::string ExpertCache::read_expert(int layer, int32_t e, int32_t slot) {
  uint8_t* base = arena_ + size_t(slot) * size_t(slot_bytes_);
  for (const Span& s : layouts_[size_t(layer)][size_t(e)].spans) {
    const std::string& path = paths_[size_t(s.file)];
    auto what = [&] {
      return "routed expert " + std::to_string(e) + " of MoE layer " + std::to_string(layer) + " (bytes " +
             std::to_string(s.file_off) + ".." + std::to_string(s.file_off + s.need) + ")";
    };
    int fd = direct_fds_[size_t(s.file)];
    bool direct = fd >= 0;
    if (!direct) fd = buffered_fds_[size_t(s.file)];
    uint64_t done = 0;
    while (done < s.len) {
      // Pieces of 4 MiB: O_DIRECT requests of 8-16 MiB read slower on the disks tried here.
      const size_t piece = size_t(std::min<uint64_t>(s.len - done, kReadPiece));
      const ssize_t n = ::pread(fd, base + s.slot_off + done, piece, off_t(s.file_off + done));
      if (n < 0) {
        if (errno == EINTR) continue;
        if (direct && errno == EINVAL) {  // this file system (or a short read's tail) wants buffered reads
          fd = buffered_fds_[size_t(s.file)];
          direct = false;
          continue;
        }
        return path + ": cannot read " + what() + ": " + std::strerror(errno);
      }
      if (n == 0) break;  // end of file
      done += uint64_t(n);
    }
    if (done < s.need)
      return path + ": the file ends at byte " + std::to_string(s.file_off + done) + ", inside " + what() +
             ": the shard was truncated or replaced after load";
    if (!direct) ::posix_fadvise(fd, off_t(s.file_off), off_t(s.len), POSIX_FADV_DONTNEED);
  }
  return "";
}

// ------------------------------------------------------------------------------ steps

ExpertCache::Step::Step(ExpertCache& cache, const MoeWeights* layer, std::span<const int32_t> experts)
    : c_(cache),
      layer_(cache.layer_index_.at(layer)),
      experts_(experts.begin(), experts.end()),
      copies_(experts.size()),
      state_(experts.size(), 0),
      left_(experts.size()) {
  {
    std::lock_guard<std::mutex> lock(c_.mu_);
    ExpertCacheStats& st = c_.stats_;
    std::vector<int32_t>& predicted = c_.predicted_[size_t(layer_)];
    if (!predicted.empty()) {
      st.predicted += predicted.size();
      st.chosen_predicted_layers += experts_.size();
      for (int32_t e : experts_) st.predicted_chosen += std::binary_search(predicted.begin(), predicted.end(), e);
      predicted.clear();
    }
    for (int32_t e : experts_) {
      Entry& en = c_.entry(layer_, e);
      ++st.lookups;
      st.hits += en.state == kResident;
      ++en.pins;
      c_.queue_locked(layer_, e, true);
    }
  }
  c_.work_cv_.notify_all();
}

ExpertCache::Step::~Step() {
  {
    std::lock_guard<std::mutex> lock(c_.mu_);
    for (size_t i = 0; i < experts_.size(); ++i)
      if (state_[i] != 2) {
        Entry& en = c_.entry(layer_, experts_[i]);
        --en.pins;
        if (en.pins == 0) en.wanted = false;
      }
  }
  c_.work_cv_.notify_all();
}

bool ExpertCache::Step::next(std::vector<int32_t>& ready) {
  if (left_ == 0) return false;
  std::unique_lock<std::mutex> lock(c_.mu_);
  const auto t0 = std::chrono::steady_clock::now();
  bool waited = false;
  for (;;) {
    size_t found = 0;
    for (size_t i = 0; i < experts_.size(); ++i) {
      if (state_[i] != 0) continue;
      Entry& en = c_.entry(layer_, experts_[i]);
      if (en.state == kResident) {
        copies_[i] = c_.copy_in_slot(layer_, experts_[i], en.slot);
        state_[i] = 1;
        en.wanted = false;
        en.ahead_unused = false;
        en.last_use = ++c_.tick_;
        ready.push_back(int32_t(i));
        ++found;
      } else if (en.state == kFailed) {
        const std::string error = en.error;
        en.state = kAbsent;  // a later step reads it again
        en.wanted = false;
        throw std::runtime_error(error);
      } else if (en.state == kAbsent) {
        c_.queue_locked(layer_, experts_[i], true);
        c_.work_cv_.notify_all();
      }
    }
    if (found > 0) {
      left_ -= found;
      break;
    }
    waited = true;
    c_.done_cv_.wait(lock);
  }
  if (waited) c_.stats_.wait_seconds += seconds_since(t0);
  return true;
}

void ExpertCache::Step::release(int32_t index) {
  {
    std::lock_guard<std::mutex> lock(c_.mu_);
    if (state_[size_t(index)] != 1) return;
    state_[size_t(index)] = 2;
    Entry& en = c_.entry(layer_, experts_[size_t(index)]);
    --en.pins;
    en.last_use = ++c_.tick_;
  }
  c_.work_cv_.notify_all();
}

}  // namespace deepinfer::v4
