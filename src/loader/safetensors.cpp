#include "loader/safetensors.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <utility>

namespace deepinfer {

using json = nlohmann::json;
namespace fs = std::filesystem;

const char* dtype_name(DType t) {
  switch (t) {
    case DType::BF16: return "BF16";
    case DType::F16: return "F16";
    case DType::F32: return "F32";
    case DType::F64: return "F64";
    case DType::F8_E4M3: return "F8_E4M3";
    case DType::F8_E8M0: return "F8_E8M0";
    case DType::I8: return "I8";
    case DType::U8: return "U8";
    case DType::I16: return "I16";
    case DType::I32: return "I32";
    case DType::I64: return "I64";
    case DType::BOOL: return "BOOL";
  }
  return "?";
}

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F64: case DType::I64: return 8;
    case DType::F32: case DType::I32: return 4;
    case DType::BF16: case DType::F16: case DType::I16: return 2;
    default: return 1;
  }
}

static bool parse_dtype(const std::string& s, DType* out) {
  static const std::map<std::string, DType> kNames = {
      {"BF16", DType::BF16}, {"F16", DType::F16}, {"F32", DType::F32}, {"F64", DType::F64},
      {"F8_E4M3", DType::F8_E4M3}, {"F8_E8M0", DType::F8_E8M0}, {"I8", DType::I8},
      {"U8", DType::U8}, {"I16", DType::I16}, {"I32", DType::I32}, {"I64", DType::I64},
      {"BOOL", DType::BOOL}};
  auto it = kNames.find(s);
  if (it == kNames.end()) return false;
  *out = it->second;
  return true;
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string TensorView::shape_str() const {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

SafetensorsFile::SafetensorsFile(const std::string& path)
    : file_(path), tensors_(parse_safetensors(file_.data(), file_.size(), path)) {}

std::map<std::string, TensorView> parse_safetensors(const uint8_t* file_data, size_t size, const std::string& path) {
  std::map<std::string, TensorView> tensors_;
  auto fail = [&](const std::string& what) -> LoadError { return LoadError(path + ": " + what); };
  if (size < 8) throw fail("truncated: shorter than the 8-byte header length");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | file_data[i];
  if (header_len > size - 8) throw fail("truncated: header length " + std::to_string(header_len) +
                                        " exceeds file size " + std::to_string(size));
  json header;
  try {
    header = json::parse(file_data + 8, file_data + 8 + header_len);
  } catch (const std::exception& e) {
    throw fail(std::string("malformed JSON header: ") + e.what());
  }
  if (!header.is_object()) throw fail("header is not a JSON object");
  const uint8_t* base = file_data + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (auto& item : header.items()) {
    const std::string name = item.key();
    const json& info = item.value();
    if (name == "__metadata__") continue;
    auto tfail = [&](const std::string& what) { return fail("tensor '" + name + "': " + what); };
    if (!info.is_object() || !info.contains("dtype") || !info.contains("shape") ||
        !info.contains("data_offsets"))
      throw tfail("header entry lacks dtype, shape or data_offsets");
    TensorView t;
    t.name = name;
    t.file = path;
    if (!info["dtype"].is_string() || !parse_dtype(info["dtype"].get<std::string>(), &t.dtype))
      throw tfail("unknown dtype " + info["dtype"].dump());
    const json& shape = info["shape"];
    if (!shape.is_array()) throw tfail("shape is not an array");
    uint64_t numel = 1;
    for (const json& d : shape) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) throw tfail("bad dimension " + d.dump());
      uint64_t dim = d.get<uint64_t>();
      if (dim != 0 && numel > std::numeric_limits<uint64_t>::max() / 16 / dim)
        throw tfail("shape too large");
      numel *= dim;
      t.shape.push_back(int64_t(dim));
    }
    const json& off = info["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
        !off[1].is_number_unsigned())
      throw tfail("data_offsets must be two non-negative integers");
    uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    if (begin > end || end > data_size)
      throw tfail("data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                  "] lie outside the data section of " + std::to_string(data_size) +
                  " bytes (truncated file?)");
    if (end - begin != numel * dtype_size(t.dtype))
      throw tfail("byte size " + std::to_string(end - begin) + " does not match shape " +
                  t.shape_str() + " of " + dtype_name(t.dtype));
    t.data = base + begin;
    t.nbytes = size_t(end - begin);
    if (end > begin) ranges.emplace_back(begin, end);
    tensors_.emplace(name, std::move(t));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second) throw fail("tensor data ranges overlap");
  return tensors_;
}

static std::vector<std::string> shard_files(const std::string& dir) {
  fs::path d(dir);
  if (!fs::is_directory(d)) throw LoadError(dir + ": not a checkpoint directory");
  fs::path index = d / "model.safetensors.index.json";
  std::vector<std::string> files;
  if (fs::exists(index)) {
    json j;
    try {
      std::ifstream in(index);
      j = json::parse(in);
    } catch (const std::exception& e) {
      throw LoadError(index.string() + ": malformed JSON: " + e.what());
    }
    if (!j.contains("weight_map") || !j["weight_map"].is_object())
      throw LoadError(index.string() + ": missing object 'weight_map'");
    std::set<std::string> uniq;
    for (auto& [name, f] : j["weight_map"].items()) {
      if (!f.is_string()) throw LoadError(index.string() + ": weight_map['" + name + "'] is not a file name");
      std::string fname = f.get<std::string>();
      if (fname.find('/') != std::string::npos)
        throw LoadError(index.string() + ": shard name '" + fname + "' must be a plain file name");
      uniq.insert(fname);
    }
    for (const auto& f : uniq) files.push_back((d / f).string());
  } else if (fs::exists(d / "model.safetensors")) {
    files.push_back((d / "model.safetensors").string());
  } else {
    for (auto& e : fs::directory_iterator(d))
      if (e.path().extension() == ".safetensors") files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
  }
  if (files.empty()) throw LoadError(dir + ": no .safetensors files found");
  return files;
}

void TensorStore::add(const std::map<std::string, TensorView>& tensors, const std::string& source) {
  for (const auto& [name, t] : tensors) {
    auto [it, inserted] = tensors_.emplace(name, t);
    if (!inserted) throw LoadError(source + ": tensor '" + name + "' also appears in " + it->second.file);
  }
}

TensorStore::TensorStore(const std::string& dir) {
  for (const auto& path : shard_files(dir)) {
    if (!fs::exists(path)) throw LoadError(path + ": shard listed in the index is missing");
    files_.push_back(std::make_unique<SafetensorsFile>(path));
    add(files_.back()->tensors(), path);
  }
}

TensorStore::TensorStore(std::vector<MemoryImage> images) : images_(std::move(images)) {
  if (images_.empty()) throw LoadError("in-memory checkpoint: no safetensors images");
  // The images' memory does not move with the vector: the views stay valid.
  for (const MemoryImage& im : images_) add(parse_safetensors(im.data(), im.size(), im.name()), im.name());
}

MemoryImage::MemoryImage(size_t bytes, std::string name) : name_(std::move(name)) {
  if (bytes == 0) return;
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    throw LoadError(name_ + ": cannot allocate " + std::to_string(bytes) + " bytes of memory: " + std::strerror(errno));
#ifdef MADV_HUGEPAGE
  if (bytes >= (size_t(2) << 20)) ::madvise(p, bytes, MADV_HUGEPAGE);  // advice only
#endif
  data_ = static_cast<uint8_t*>(p);
  size_ = bytes;
}

MemoryImage::~MemoryImage() { release(); }

void MemoryImage::release() {
  if (data_) ::munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
}

MemoryImage::MemoryImage(MemoryImage&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)), name_(std::move(o.name_)) {}

MemoryImage& MemoryImage::operator=(MemoryImage&& o) noexcept {
  if (this != &o) {
    release();
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    name_ = std::move(o.name_);
  }
  return *this;
}

const TensorView* TensorStore::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

std::vector<std::vector<std::pair<size_t, size_t>>> TensorStore::kept_ranges(const Skip& skip) const {
  std::vector<std::vector<std::pair<size_t, size_t>>> ranges(files_.size());
  for (size_t i = 0; i < files_.size(); ++i) {
    const SafetensorsFile& f = *files_[i];
    if (!skip) {
      ranges[i].push_back({0, f.mapped().size()});
      continue;
    }
    for (const auto& [name, t] : f.tensors())
      if (!skip(name) && t.nbytes) {
        const size_t b = size_t(t.data - f.mapped().data());
        ranges[i].push_back({b, b + t.nbytes});
      }
    std::sort(ranges[i].begin(), ranges[i].end());
    std::vector<std::pair<size_t, size_t>> merged;
    for (const auto& r : ranges[i])
      if (!merged.empty() && r.first <= merged.back().second) merged.back().second = std::max(merged.back().second, r.second);
      else merged.push_back(r);
    ranges[i] = std::move(merged);
  }
  return ranges;
}

void TensorStore::populate(const std::function<void(size_t, size_t)>& progress, const Skip& skip) const {
  constexpr size_t kStep = size_t(256) << 20;
  size_t all = 0, done = 0;
  // Byte ranges [begin, end) of each file to read: the whole file, or its kept tensors.
  const auto ranges = kept_ranges(skip);
  for (const auto& file : ranges)
    for (const auto& r : file) all += r.second - r.first;
  for (size_t i = 0; i < files_.size(); ++i)
    for (const auto& [b, e] : ranges[i])
      for (size_t off = b; off < e; off += kStep) {
        const size_t n = std::min(kStep, e - off);
        files_[i]->mapped().populate(off, n);
        done += n;
        if (progress) progress(done, all);
      }
}

size_t TensorStore::lock(const Skip& skip, std::string* error) const {
  const size_t page = size_t(::sysconf(_SC_PAGESIZE));
  const auto ranges = kept_ranges(skip);
  std::vector<std::pair<const uint8_t*, size_t>> locked;
  size_t bytes = 0;
  for (size_t i = 0; i < files_.size(); ++i)
    for (const auto& [b, e] : ranges[i]) {
      const uint8_t* p = files_[i]->mapped().data() + b / page * page;
      const size_t n = e - b / page * page;
      if (::mlock(p, n) != 0) {
        if (error) *error = std::strerror(errno);
        for (const auto& [q, m] : locked) ::munlock(q, m);
        return 0;
      }
      locked.push_back({p, n});
      bytes += n;
    }
  return bytes;
}

std::vector<std::string> TensorStore::shard_paths() const {
  std::vector<std::string> paths;
  for (const auto& f : files_) paths.push_back(f->path());
  return paths;
}

bool TensorStore::locate(const uint8_t* data, size_t n, size_t* shard, uint64_t* offset) const {
  for (size_t i = 0; i < files_.size(); ++i) {
    const uint8_t* base = files_[i]->mapped().data();
    if (base && data >= base && data + n <= base + files_[i]->mapped().size()) {
      *shard = i;
      *offset = uint64_t(data - base);
      return true;
    }
  }
  return false;
}

void TensorStore::populate_bytes(const uint8_t* data, size_t n) const {
  for (const auto& f : files_) {
    const uint8_t* base = f->mapped().data();
    if (data >= base && data + n <= base + f->mapped().size()) {
      f->mapped().populate(size_t(data - base), n);
      return;
    }
  }
}

namespace {

// Index of the first element of n whose bits, masked, equal the mask (an exponent field of
// all ones: NaN or Inf), or -1. One pass with no early exit, so it vectorises; the index is
// found in a second pass only for a corrupt tensor.
template <class U>
int64_t first_all_ones(const uint8_t* data, int64_t n, U mask) {
  U any = 0;
  for (int64_t i = 0; i < n; ++i) {
    U v;
    std::memcpy(&v, data + i * int64_t(sizeof(U)), sizeof(U));
    any |= U((v & mask) == mask);
  }
  if (!any) return -1;
  for (int64_t i = 0; i < n; ++i) {
    U v;
    std::memcpy(&v, data + i * int64_t(sizeof(U)), sizeof(U));
    if ((v & mask) == mask) return i;
  }
  return -1;
}

std::string index_str(const std::vector<int64_t>& shape, int64_t flat) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = shape[d] ? flat % shape[d] : 0;
    flat = shape[d] ? flat / shape[d] : 0;
  }
  std::ostringstream os;
  os << '[';
  for (size_t d = 0; d < idx.size(); ++d) os << (d ? ", " : "") << idx[d];
  os << ']';
  return os.str();
}

}  // namespace

void verify_finite(const TensorView& t) {
  const int64_t n = t.numel();
  int64_t bad = -1;
  switch (t.dtype) {
    case DType::F8_E4M3: bad = first_all_ones<uint8_t>(t.data, n, 0x7f); break;  // e4m3fn: only S.1111.111 is NaN
    case DType::F8_E8M0: bad = first_all_ones<uint8_t>(t.data, n, 0xff); break;
    case DType::BF16: bad = first_all_ones<uint16_t>(t.data, n, 0x7f80); break;
    case DType::F16: bad = first_all_ones<uint16_t>(t.data, n, 0x7c00); break;
    case DType::F32: bad = first_all_ones<uint32_t>(t.data, n, 0x7f800000u); break;
    case DType::F64: bad = first_all_ones<uint64_t>(t.data, n, 0x7ff0000000000000ull); break;
    default: return;
  }
  if (bad < 0) return;
  const size_t sz = dtype_size(t.dtype);
  uint64_t code = 0;
  std::memcpy(&code, t.data + size_t(bad) * sz, sz);  // little-endian host, as the loader assumes
  // NaN when the mantissa is non-zero (e4m3 / e8m0 have no infinities).
  const uint64_t man_mask = t.dtype == DType::BF16 ? 0x7f : t.dtype == DType::F16 ? 0x3ff
                          : t.dtype == DType::F32  ? 0x7fffff
                          : t.dtype == DType::F64  ? 0xfffffffffffffull : 0xff;
  const char* kind = (code & man_mask) ? "NaN" : "Inf";
  std::ostringstream os;
  os << t.file << ": tensor '" << t.name << "' (" << dtype_name(t.dtype) << ' ' << t.shape_str() << ") holds " << kind
     << " at element " << index_str(t.shape, bad) << " (code 0x" << std::hex << code << std::dec
     << "): the checkpoint's weights are corrupt";
  throw LoadError(os.str());
}

void TensorStore::verify_finite(const Skip& skip) const {
  for (const auto& [name, t] : tensors_)
    if (!skip || !skip(name)) deepinfer::verify_finite(t);
}

size_t TensorStore::total_bytes(const Skip& skip) const {
  size_t n = 0;
  for (const auto& [name, t] : tensors_)
    if (!skip || !skip(name)) n += t.nbytes;
  return n;
}

}  // namespace deepinfer
