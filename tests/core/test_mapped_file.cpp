#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/mapped_file.h"

using namespace deepinfer;

namespace {

std::string write_pattern_file(const std::string& name, size_t size) {
  const std::string path = ::testing::TempDir() + name;
  std::vector<uint8_t> bytes(size);
  for (size_t i = 0; i < size; ++i) bytes[i] = uint8_t((i * 131 + (i >> 12)) & 0xff);
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(size));
  return path;
}

bool same_as_pattern(const MappedFile& f) {
  for (size_t i = 0; i < f.size(); ++i)
    if (f.data()[i] != uint8_t((i * 131 + (i >> 12)) & 0xff)) return false;
  return true;
}

// True when [p, p + n) is mapped in this process (mincore fails with ENOMEM on a hole).
bool mapped(const void* p, size_t n) {
  const size_t page = size_t(::sysconf(_SC_PAGESIZE));
  const uintptr_t a = reinterpret_cast<uintptr_t>(p) / page * page;
  std::vector<unsigned char> v((n + page - 1) / page + 1);
  return ::mincore(reinterpret_cast<void*>(a), n, v.data()) == 0;
}

}  // namespace

// Files of 2 MiB and more are placed on a 2 MiB boundary (so the kernel can map them with
// huge pages); the bytes are the file's, and the address space reserved after the file for
// the alignment is given back (the page after its end is a hole: at least one page of the
// reservation always lies there).
TEST(MappedFile, LargeFilesAreHugePageAlignedAndExact) {
  for (size_t size : {size_t(4097), size_t(2) << 20, (size_t(3) << 20) + 12345}) {
    const std::string path = write_pattern_file("mapped_file_" + std::to_string(size), size);
    MappedFile f(path);
    ASSERT_EQ(f.size(), size);
    EXPECT_TRUE(same_as_pattern(f)) << size;
    EXPECT_TRUE(f.populate(0, size));
    if (size >= (size_t(2) << 20)) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(f.data()) % (size_t(2) << 20), 0u) << size;
      const size_t page = size_t(::sysconf(_SC_PAGESIZE));
      const size_t end = (size + page - 1) / page * page;
      EXPECT_FALSE(mapped(f.data() + end, page)) << "reservation after the file left mapped, size " << size;
    }
    std::remove(path.c_str());
  }
}

TEST(MappedFile, MissingFileNamesThePath) {
  try {
    MappedFile f(::testing::TempDir() + "no_such_checkpoint.safetensors");
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no_such_checkpoint"), std::string::npos) << e.what();
  }
}
