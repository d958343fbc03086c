// Incremental parsing of HTTP/1.1 requests (RFC 9112) from a connection's byte buffer: the
// head first, then a body framed by Content-Length or by the chunked transfer coding.
// Pure functions over bytes, no sockets: the connection layer (http_io.cpp) and the fuzzer
// (tests/fuzz/fuzz_http.cpp) drive the same code. Anything ambiguous is an error, never a
// guess: a request smuggled past one reading would be read differently by a proxy.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace deepinfer::server::http {

struct Limits {
  size_t max_head_bytes = 64 * 1024;  // request line + headers
  size_t max_headers = 128;
};

struct Head {
  std::string method;
  std::string target;  // as sent: path and query
  std::string path;    // percent-decoded, without the query
  std::string query;   // after '?', not decoded
  int minor_version = 1;  // HTTP/1.<minor>
  std::vector<std::pair<std::string, std::string>> headers;  // names as sent, values trimmed
  bool keep_alive = true;        // after this request, by version and Connection
  bool expect_continue = false;  // Expect: 100-continue
  bool chunked = false;          // Transfer-Encoding: chunked
  uint64_t content_length = 0;   // when !chunked

  // First value of a header, case-insensitive name; empty when absent.
  std::string header(std::string_view name) const;
  bool has_header(std::string_view name) const;
};

// A request the parser rejects: the status to answer with (then the connection closes).
struct Error {
  int status = 400;
  std::string message;
};

enum class Progress { kNeedMore, kDone, kError };

// Scans buf for a complete head. `scanned` remembers how far earlier calls looked, so that
// a head trickled in byte by byte costs linear time. On kDone, head and head_bytes (the
// bytes the head took, its blank line included) are set; on kError, error.
struct HeadParser {
  size_t scanned = 0;
  Progress parse(std::string_view buf, const Limits& limits, Head& head, size_t& head_bytes, Error& error);
};

// Decodes a chunked body incrementally: call with the buffer from the body's first byte each
// time more bytes arrived; it resumes where it stopped. Trailer fields are read and dropped.
class ChunkedDecoder {
 public:
  // On kDone, `consumed` is the number of bytes of buf the chunked body took.
  Progress feed(std::string_view buf, size_t body_limit, std::string& body, size_t& consumed, Error& error);

 private:
  enum class State { kSize, kData, kDataEnd, kTrailer, kDone };
  State state_ = State::kSize;
  size_t pos_ = 0;        // bytes of buf consumed so far
  uint64_t remaining_ = 0;  // data bytes left in the current chunk
};

// "%41" -> "A"; malformed escapes are left as they are.
std::string percent_decode(std::string_view s);

}  // namespace deepinfer::server::http
