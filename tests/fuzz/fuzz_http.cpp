// fuzz-sources: src/server/http_parser.cpp src/core/json_limits.cpp
// libFuzzer harness for the HTTP/1.1 request parser (src/server/http_parser.h). The first input
// byte picks a split step; the rest is what a client sent on one connection. The parser must
// never crash, must read the same requests whether the bytes come whole or trickled in
// pieces, and must never claim more bytes than it was given. Every request it accepts is
// re-checked for the framing rules (one Content-Length, chunked only alone).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "core/json_limits.h"
#include "server/http_parser.h"

using namespace deepinfer::server::http;

namespace {

struct Parsed {
  std::vector<std::string> requests;  // method path body, one per request read
  int error = 0;
};

// Reads requests from `wire` as a connection would, handing the parser `step` more bytes
// each time (0 = everything at once).
Parsed read_all(std::string_view wire, size_t step) {
  Parsed out;
  Limits limits;
  limits.max_head_bytes = 2048;
  limits.max_headers = 16;
  const size_t body_limit = 4096;
  std::string buf;
  size_t fed = 0;
  HeadParser hp;
  Head head;
  size_t head_bytes = 0;
  bool have_head = false;
  ChunkedDecoder chunked;
  std::string body;
  for (;;) {
    const size_t take = step == 0 ? wire.size() - fed : std::min(step, wire.size() - fed);
    buf.append(wire.substr(fed, take));
    fed += take;
    bool progressed = true;
    while (progressed) {
      progressed = false;
      Error err;
      if (!have_head) {
        const Progress p = hp.parse(buf, limits, head, head_bytes, err);
        if (p == Progress::kError) {
          out.error = err.status;
          return out;
        }
        if (p == Progress::kNeedMore) break;
        if (head_bytes > buf.size()) abort();
        if (head.chunked && head.has_header("Content-Length")) abort();
        have_head = true;
        if (!head.chunked && head.content_length > body_limit) {
          out.error = 413;
          return out;
        }
      }
      size_t used = 0;
      if (head.chunked) {
        const Progress p = chunked.feed(std::string_view(buf).substr(head_bytes), body_limit, body, used, err);
        if (p == Progress::kError) {
          out.error = err.status;
          return out;
        }
        if (p == Progress::kNeedMore) break;
        if (body.size() > body_limit) abort();
      } else {
        used = size_t(head.content_length);
        if (buf.size() - head_bytes < used) break;
        body = buf.substr(head_bytes, used);
      }
      if (head_bytes + used > buf.size()) abort();
      out.requests.push_back(head.method + " " + head.path + " " + body);
      buf.erase(0, head_bytes + used);
      hp = HeadParser{};
      chunked = ChunkedDecoder{};
      body.clear();
      have_head = false;
      progressed = true;
    }
    if (fed == wire.size()) return out;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const size_t step = 1 + data[0] % 17;
  std::string_view wire(reinterpret_cast<const char*>(data + 1), size - 1);
  const Parsed whole = read_all(wire, 0);
  const Parsed trickled = read_all(wire, step);
  if (whole.requests != trickled.requests || whole.error != trickled.error) abort();
  // The JSON depth scan must agree with itself when stopped early.
  const size_t d = deepinfer::json_nesting_depth(wire);
  if (d > 3 && deepinfer::json_nesting_depth(wire, 3) <= 3) abort();
  (void)percent_decode(wire);
  return 0;
}
