#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <utility>

namespace deepinfer {

namespace {

constexpr size_t kHugePage = size_t(2) << 20;

// Maps the file at a 2 MiB-aligned address and asks for transparent huge pages there: pages
// the kernel reads in for this mapping then come as 2 MiB folios mapped by one PMD entry
// each (ext4 / xfs large folios), so streaming weights no longer misses the TLB every 4 KiB.
// Pages already cached as small folios stay small; nothing changes but the TLB reach.
void* map_huge_aligned(int fd, size_t size) {
  if (size < kHugePage) return ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  // Reserve size + 2 MiB of address space, then place the file on the aligned boundary.
  void* area = ::mmap(nullptr, size + kHugePage, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (area == MAP_FAILED) return ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const uintptr_t a = reinterpret_cast<uintptr_t>(area);
  const uintptr_t aligned = (a + kHugePage - 1) & ~uintptr_t(kHugePage - 1);
  void* p = ::mmap(reinterpret_cast<void*>(aligned), size, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd, 0);
  if (p == MAP_FAILED) {
    ::munmap(area, size + kHugePage);
    return ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  }
  // Give back the reservation on both sides of the file.
  if (aligned > a) ::munmap(area, aligned - a);
  const uintptr_t end = aligned + size, area_end = a + size + kHugePage;
  const uintptr_t end_page = (end + 4095) & ~uintptr_t(4095);
  if (area_end > end_page) ::munmap(reinterpret_cast<void*>(end_page), area_end - end_page);
#ifdef MADV_HUGEPAGE
  ::madvise(p, size, MADV_HUGEPAGE);  // advice only: a kernel without file THP ignores it
#endif
  return p;
}

}  // namespace

MappedFile::MappedFile(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    throw std::runtime_error(path + ": cannot stat: " + std::strerror(err));
  }
  size_ = size_t(st.st_size);
  if (size_ > 0) {
    void* p = map_huge_aligned(fd, size_);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      throw std::runtime_error(path + ": cannot mmap: " + std::strerror(err));
    }
    data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
}

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22  // Linux 5.14
#endif

bool MappedFile::populate(size_t offset, size_t n) const {
  if (!data_ || offset >= size_) return false;
  n = std::min(n, size_ - offset);
  const size_t page = size_t(::sysconf(_SC_PAGESIZE));
  const size_t begin = offset / page * page;
  uint8_t* p = const_cast<uint8_t*>(data_) + begin;
  if (::madvise(p, n + (offset - begin), MADV_POPULATE_READ) == 0) return true;
  volatile uint8_t sink = 0;  // older kernels: touch every page
  for (size_t i = 0; i < n + (offset - begin); i += page) sink = sink + p[i];
  return true;
}

MappedFile::~MappedFile() { release(); }

MappedFile::MappedFile(MappedFile&& o) noexcept
    : path_(std::move(o.path_)), data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    release();
    path_ = std::move(o.path_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

void MappedFile::release() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace deepinfer
