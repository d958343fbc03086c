#include "model/deepseek_v4/top_k.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

namespace deepinfer::v4 {

namespace {

// Each candidate as one 64-bit key, the score's order-preserving bits complemented (larger
// score first) above its index: ascending keys are the comparator's order, a total order
// on integers.
uint64_t rank_key(float score, int64_t i) {
  uint32_t b;
  std::memcpy(&b, &score, 4);
  // Ascending b <-> ascending float (a -0 and +0 fold to one value, as == sees them).
  b = (b & 0x7fffffffu) == 0 ? 0x80000000u : (b & 0x80000000u) ? ~b : b | 0x80000000u;
  return (uint64_t(~b) << 32) | uint64_t(i);
}

// The k smallest of keys[0, n) (distinct) to the front of keys, in no particular order, by
// their score bits a byte at a time from the top: a histogram of the candidates' byte, every
// candidate of a smaller byte taken, those of the boundary byte kept as the next candidates.
// Linear in n, no data-dependent branches in the counting. Returns with keys[0, k) chosen.
void radix_select(uint64_t* keys, int64_t n, int64_t k, uint64_t* tmp) {
  int64_t taken = 0;           // keys[0, taken) chosen
  int64_t lo = 0, hi = n;      // candidates keys[lo, hi), all chosen ones before lo
  for (int shift = 56; shift >= 32 && taken < k; shift -= 8) {
    int64_t count[256] = {};
    for (int64_t i = lo; i < hi; ++i) ++count[(keys[i] >> shift) & 0xff];
    int64_t before = 0, boundary = 0;
    while (taken + before + count[boundary] < k) before += count[boundary++];
    // Partition [lo, hi): bytes below the boundary to the front, the boundary's next, the
    // rest dropped; stable, so the candidates keep their index order.
    int64_t w_low = taken, w_mid = 0;
    for (int64_t i = lo; i < hi; ++i) {
      const int64_t byte = int64_t((keys[i] >> shift) & 0xff);
      if (byte < boundary) keys[w_low++] = keys[i];
      else if (byte == boundary) tmp[w_mid++] = keys[i];
    }
    std::copy_n(tmp, w_mid, keys + w_low);
    taken = w_low;
    lo = w_low;
    hi = w_low + w_mid;
    if (taken + w_mid == k) return;  // the whole boundary byte fits
  }
  // The remaining candidates share all 32 score bits: the lowest indices win, and they are
  // in index order.
}

// keys[0, k) ascending, by LSD radix on bytes: the index bytes a key of n candidates can
// use, then the four score bytes; a byte every key shares is skipped. tmp: k slots.
void radix_sort(uint64_t* keys, int64_t k, int64_t n, uint64_t* tmp) {
  int index_bytes = 1;
  while (index_bytes < 4 && (int64_t(1) << (8 * index_bytes)) < n) ++index_bytes;
  uint64_t* src = keys;
  uint64_t* dst = tmp;
  for (int byte = 0; byte < 8; ++byte) {
    if (byte >= index_bytes && byte < 4) continue;  // index bytes above n's: all zero
    const int shift = 8 * byte;
    int64_t count[256] = {};
    for (int64_t i = 0; i < k; ++i) ++count[(src[i] >> shift) & 0xff];
    if (count[(src[0] >> shift) & 0xff] == k) continue;  // one value: the order stands
    int64_t pos[256];
    int64_t at = 0;
    for (int b = 0; b < 256; ++b) {
      pos[b] = at;
      at += count[b];
    }
    for (int64_t i = 0; i < k; ++i) dst[pos[(src[i] >> shift) & 0xff]++] = src[i];
    std::swap(src, dst);
  }
  if (src != keys) std::copy_n(src, k, keys);
}

}  // namespace

void select_top_k(std::span<const float> score, int64_t k, std::span<int64_t> order, std::span<int64_t> spare,
                  int64_t* out) {
  const int64_t n = int64_t(score.size());
  if (k <= 0) return;
  bool nan = false;
  for (float v : score) nan |= std::isnan(v);
  if (nan || n >= (int64_t(1) << 32)) {
    std::iota(order.begin(), order.end(), 0);
    auto before = [&](int64_t x, int64_t y) { return score[x] != score[y] ? score[x] > score[y] : x < y; };
    if (k < n) std::nth_element(order.begin(), order.begin() + k, order.end(), before);
    std::sort(order.begin(), order.begin() + k, before);
    std::copy_n(order.begin(), k, out);
    return;
  }
  uint64_t* keys = reinterpret_cast<uint64_t*>(order.data());
  for (int64_t i = 0; i < n; ++i) keys[i] = rank_key(score[i], i);
  uint64_t* tmp = reinterpret_cast<uint64_t*>(spare.data());
  if (k < n) radix_select(keys, n, k, tmp);
  radix_sort(keys, k, n, tmp);
  for (int64_t i = 0; i < k; ++i) out[i] = int64_t(keys[i] & 0xffffffffu);
}

}  // namespace deepinfer::v4
