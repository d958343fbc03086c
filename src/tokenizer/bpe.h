// Byte-level BPE model: merges by rank exactly like Hugging Face `tokenizers`
// (BPE::merge_word + Word::merge_all: a priority queue of candidate pairs ordered by
// (rank, position), O(n log n) per word), on the GPT-2 byte-to-unicode alphabet, with a
// word cache.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace deepinfer::tokenizer {

// GPT-2 byte <-> unicode mapping used by ByteLevel pre-tokenizer and decoder: printable
// Latin-1 bytes map to themselves, the other 68 bytes to U+0100.. in byte order.
char32_t byte_to_char(uint8_t b);
// The byte a character of the byte-level alphabet stands for, or -1.
int char_to_byte(char32_t c);
// Maps raw bytes to the byte-level string (UTF-8), e.g. " the" -> "Ġthe".
std::string byte_level_encode(std::string_view raw);
// Inverse for a string made only of byte-level characters; nullopt otherwise.
std::optional<std::string> byte_level_decode(std::string_view mapped);

// Merge work done by this thread so far: symbols set up plus merge candidates popped from
// the queue (each pop is O(log n)). For tests that check work grows linearly with a word.
uint64_t bpe_work();

struct BpeOptions {
  std::optional<std::string> unk_token;
  bool fuse_unk = false;
  bool byte_fallback = false;
  bool ignore_merges = false;
};

struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept;
};

class BpeModel {
 public:
  // vocab: token (byte-level form, as in tokenizer.json) -> id. merges: pairs in rank order.
  // Throws std::runtime_error when a merge refers to a token missing from the vocabulary.
  BpeModel(const std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>& vocab,
           const std::vector<std::pair<std::string, std::string>>& merges, const BpeOptions& options);
  ~BpeModel();

  // Appends the ids for one pre-tokenized piece, given as raw (not byte-level mapped) bytes.
  void encode(std::string_view raw, std::vector<int32_t>& out) const;

  std::size_t merge_count() const { return merge_count_; }
  std::size_t cache_entries() const;
  void clear_cache() const;

  // Words of at most this many bytes are cached; once the cache holds kCacheCapacity
  // words it stops growing (as tokenizers' BPE cache does), bounding it to a few MB.
  static constexpr std::size_t kMaxCachedWordBytes = 128;
  static constexpr std::size_t kCacheCapacity = 1 << 16;

 private:
  struct MergeTable;
  void merge_word(std::string_view raw, std::vector<int32_t>& out) const;

  std::unique_ptr<MergeTable> merges_;
  std::size_t merge_count_ = 0;
  int32_t byte_id_[256];                        // vocab id of each byte's character, -1 if absent
  std::vector<int32_t> byte_fallback_ids_[256];  // byte_fallback tokens for absent characters
  std::optional<int32_t> unk_id_;
  BpeOptions options_;
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> raw_vocab_;  // ignore_merges only

  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache_;
};

}  // namespace deepinfer::tokenizer
