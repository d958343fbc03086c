#include "tokenizer/bpe.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "tokenizer/unicode.h"

namespace deepinfer::tokenizer {

namespace {

struct ByteMaps {
  std::array<char32_t, 256> to_char{};
  std::array<int16_t, 324> from_char{};  // characters used are < U+0144

  ByteMaps() {
    from_char.fill(-1);
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_char[b] = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + extra++);
      from_char[to_char[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteMaps& byte_maps() {
  static const ByteMaps maps;
  return maps;
}

}  // namespace

char32_t byte_to_char(uint8_t b) { return byte_maps().to_char[b]; }

int char_to_byte(char32_t c) { return c < byte_maps().from_char.size() ? byte_maps().from_char[c] : -1; }

std::string byte_level_encode(std::string_view raw) {
  std::string out;
  out.reserve(raw.size() * 2);
  for (unsigned char b : raw) append_utf8(out, byte_to_char(b));
  return out;
}

std::optional<std::string> byte_level_decode(std::string_view mapped) {
  std::string out;
  const auto* p = reinterpret_cast<const unsigned char*>(mapped.data());
  std::size_t i = 0;
  while (i < mapped.size()) {
    std::size_t len;
    char32_t cp;
    if (utf8_step(p + i, mapped.size() - i, len, cp) != Utf8Step::kValid) return std::nullopt;
    const int b = char_to_byte(cp);
    if (b < 0) return std::nullopt;
    out.push_back(static_cast<char>(b));
    i += len;
  }
  return out;
}

std::size_t StringHash::operator()(std::string_view s) const noexcept {
  // FNV-1a over 8-byte words, then a final mix; good enough for short words.
  uint64_t h = 0xcbf29ce484222325ull ^ s.size();
  std::size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = (h ^ w) * 0x100000001b3ull;
    h ^= h >> 29;
  }
  for (; i < s.size(); ++i) h = (h ^ static_cast<unsigned char>(s[i])) * 0x100000001b3ull;
  h ^= h >> 32;
  h *= 0xd6e8feb86659fd93ull;
  h ^= h >> 32;
  return static_cast<std::size_t>(h);
}

// Open-addressing map (a, b) -> (rank, new id).
struct BpeModel::MergeTable {
  struct Slot {
    uint64_t key;
    int32_t rank;
    int32_t new_id;
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  std::vector<Slot> slots;
  uint64_t mask = 0;

  explicit MergeTable(std::size_t n) {
    std::size_t cap = 16;
    while (cap < n * 2 + 16) cap <<= 1;
    slots.assign(cap, Slot{kEmpty, 0, 0});
    mask = cap - 1;
  }
  static uint64_t key_of(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  static uint64_t mix(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return k;
  }
  void put(int32_t a, int32_t b, int32_t rank, int32_t new_id) {
    const uint64_t k = key_of(a, b);
    for (uint64_t i = mix(k) & mask;; i = (i + 1) & mask) {
      if (slots[i].key == kEmpty || slots[i].key == k) {
        slots[i] = Slot{k, rank, new_id};  // a repeated pair keeps the later rank, like HF
        return;
      }
    }
  }
  const Slot* get(int32_t a, int32_t b) const {
    const uint64_t k = key_of(a, b);
    for (uint64_t i = mix(k) & mask;; i = (i + 1) & mask) {
      if (slots[i].key == k) return &slots[i];
      if (slots[i].key == kEmpty) return nullptr;
    }
  }
};

BpeModel::BpeModel(const std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>& vocab,
                   const std::vector<std::pair<std::string, std::string>>& merges, const BpeOptions& options)
    : merges_(std::make_unique<MergeTable>(merges.size())), merge_count_(merges.size()), options_(options) {
  for (int b = 0; b < 256; ++b) {
    std::string ch;
    append_utf8(ch, byte_to_char(static_cast<uint8_t>(b)));
    auto it = vocab.find(ch);
    byte_id_[b] = it == vocab.end() ? -1 : it->second;
    if (byte_id_[b] < 0 && options.byte_fallback) {
      // tokenizers looks up "<0xXX>" for every UTF-8 byte of the missing character.
      std::vector<int32_t> ids;
      for (unsigned char u : ch) {
        char name[8];
        std::snprintf(name, sizeof name, "<0x%02X>", u);
        auto f = vocab.find(std::string_view(name));
        if (f == vocab.end()) {
          ids.clear();
          break;
        }
        ids.push_back(f->second);
      }
      byte_fallback_ids_[b] = std::move(ids);
    }
  }
  if (options.unk_token) {
    auto it = vocab.find(*options.unk_token);
    if (it == vocab.end()) {
      throw std::runtime_error("tokenizer.json: unk_token \"" + *options.unk_token + "\" is not in the vocabulary");
    }
    unk_id_ = it->second;
  }
  for (std::size_t r = 0; r < merges.size(); ++r) {
    const auto& [a, b] = merges[r];
    auto ia = vocab.find(a);
    auto ib = vocab.find(b);
    auto ic = vocab.find(a + b);
    if (ia == vocab.end() || ib == vocab.end() || ic == vocab.end()) {
      throw std::runtime_error("tokenizer.json: merge " + std::to_string(r + 1) + " (\"" + a + "\" \"" + b +
                               "\") uses a token missing from the vocabulary");
    }
    merges_->put(ia->second, ib->second, static_cast<int32_t>(r), ic->second);
  }
  if (options.ignore_merges) {
    for (const auto& [tok, id] : vocab) {
      if (auto raw = byte_level_decode(tok)) raw_vocab_.emplace(std::move(*raw), id);
    }
  }
}

BpeModel::~BpeModel() = default;

std::size_t BpeModel::cache_entries() const {
  std::lock_guard<std::mutex> lock(cache_mutex_);
  return cache_.size();
}

void BpeModel::clear_cache() const {
  std::lock_guard<std::mutex> lock(cache_mutex_);
  cache_.clear();
}

namespace {

struct Sym {
  int32_t id;
  int32_t prev;
  int32_t next;
  int32_t len;  // bytes covered; 0 once merged into its left neighbour
};

struct Cand {
  int32_t rank;
  int32_t pos;
  int32_t new_id;
};

struct CandAfter {  // std::priority_queue keeps the "largest" on top: invert to get min (rank, pos)
  bool operator()(const Cand& a, const Cand& b) const {
    if (a.rank != b.rank) return a.rank > b.rank;
    return a.pos > b.pos;
  }
};

thread_local std::vector<Sym> tl_syms;
thread_local std::vector<Cand> tl_heap;

}  // namespace

namespace {
thread_local uint64_t tl_bpe_work = 0;
}  // namespace

uint64_t bpe_work() { return tl_bpe_work; }

void BpeModel::merge_word(std::string_view raw, std::vector<int32_t>& out) const {
  std::vector<Sym>& syms = tl_syms;
  syms.clear();
  auto add = [&](int32_t id, int32_t len) {
    const int32_t idx = static_cast<int32_t>(syms.size());
    if (idx > 0) syms.back().next = idx;
    syms.push_back(Sym{id, idx - 1, -1, len});
  };
  // Initial symbols: one per byte (= one byte-level character), with tokenizers'
  // byte_fallback / unk handling for characters missing from the vocabulary.
  int32_t unk_len = 0;  // bytes covered by a pending unk symbol (0: none)
  for (unsigned char b : raw) {
    const int32_t id = byte_id_[b];
    if (id >= 0) {
      if (unk_len > 0) {
        add(*unk_id_, unk_len);
        unk_len = 0;
      }
      add(id, 1);
      continue;
    }
    if (!byte_fallback_ids_[b].empty()) {
      // tokenizers adds the fallback bytes without flushing a pending unk first.
      for (int32_t f : byte_fallback_ids_[b]) add(f, 1);
      continue;
    }
    if (unk_id_) {
      if (unk_len > 0 && !options_.fuse_unk) {
        add(*unk_id_, unk_len);
        unk_len = 0;
      }
      unk_len += 1;
    }
    // else: the character is dropped, as tokenizers does without an unk token.
  }
  if (unk_len > 0) add(*unk_id_, unk_len);

  if (syms.size() > 1) {
    std::vector<Cand>& heap = tl_heap;
    heap.clear();
    for (std::size_t i = 0; i + 1 < syms.size(); ++i) {
      if (const auto* m = merges_->get(syms[i].id, syms[i + 1].id)) {
        heap.push_back(Cand{m->rank, static_cast<int32_t>(i), m->new_id});
      }
    }
    std::make_heap(heap.begin(), heap.end(), CandAfter{});
    uint64_t work = syms.size() + heap.size();
    while (!heap.empty()) {
      ++work;
      std::pop_heap(heap.begin(), heap.end(), CandAfter{});
      const Cand top = heap.back();
      heap.pop_back();
      Sym& cur = syms[top.pos];
      if (cur.len == 0 || cur.next < 0) continue;
      const int32_t right_pos = cur.next;
      const Sym right = syms[right_pos];
      const auto* m = merges_->get(cur.id, right.id);
      if (!m || m->new_id != top.new_id) continue;  // stale candidate
      cur.id = top.new_id;
      cur.len += right.len;
      cur.next = right.next;
      syms[right_pos].len = 0;
      if (right.next >= 0) syms[right.next].prev = top.pos;
      if (cur.prev >= 0) {
        if (const auto* l = merges_->get(syms[cur.prev].id, cur.id)) {
          heap.push_back(Cand{l->rank, cur.prev, l->new_id});
          std::push_heap(heap.begin(), heap.end(), CandAfter{});
        }
      }
      if (cur.next >= 0) {
        if (const auto* r = merges_->get(cur.id, syms[cur.next].id)) {
          heap.push_back(Cand{r->rank, top.pos, r->new_id});
          std::push_heap(heap.begin(), heap.end(), CandAfter{});
        }
      }
    }
    tl_bpe_work += work;
  }
  for (const Sym& s : syms) {
    if (s.len > 0) out.push_back(s.id);
  }
}

void BpeModel::encode(std::string_view raw, std::vector<int32_t>& out) const {
  if (raw.empty()) return;
  if (raw.size() == 1 && byte_id_[static_cast<unsigned char>(raw[0])] >= 0) {
    out.push_back(byte_id_[static_cast<unsigned char>(raw[0])]);
    return;
  }
  if (options_.ignore_merges) {
    auto it = raw_vocab_.find(raw);
    if (it != raw_vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  const bool cacheable = raw.size() <= kMaxCachedWordBytes;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    auto it = cache_.find(raw);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const std::size_t start = out.size();
  merge_word(raw, out);
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache_.size() < kCacheCapacity) {
      cache_.emplace(std::string(raw), std::vector<int32_t>(out.begin() + static_cast<std::ptrdiff_t>(start), out.end()));
    }
  }
}

}  // namespace deepinfer::tokenizer
