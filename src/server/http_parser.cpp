#include "server/http_parser.h"

#include <algorithm>
#include <cctype>
#include <strings.h>

namespace deepinfer::server::http {

namespace {

bool is_tchar(unsigned char c) {
  if (std::isalnum(c)) return true;
  switch (c) {
    case '!': case '#': case '$': case '%': case '&': case '\'': case '*': case '+': case '-': case '.':
    case '^': case '_': case '`': case '|': case '~':
      return true;
    default:
      return false;
  }
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && (a.empty() || strncasecmp(a.data(), b.data(), a.size()) == 0);
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Calls f on each trimmed element of a comma-separated list (empty elements skipped, as
// RFC 9110 5.6.1 lets a recipient do).
template <class F>
void for_each_element(std::string_view list, F f) {
  while (!list.empty()) {
    const size_t comma = list.find(',');
    std::string_view item = trim(list.substr(0, comma));
    if (!item.empty()) f(item);
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
}

Progress fail(Error& e, int status, std::string msg) {
  e.status = status;
  e.message = std::move(msg);
  return Progress::kError;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string Head::header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (iequals(k, name)) return v;
  return {};
}

bool Head::has_header(std::string_view name) const {
  for (const auto& h : headers)
    if (iequals(h.first, name)) return true;
  return false;
}

std::string percent_decode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      const int hi = hex_value(s[i + 1]), lo = hex_value(s[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out.push_back(char(hi * 16 + lo));
        i += 2;
        continue;
      }
    }
    out.push_back(s[i]);
  }
  return out;
}

Progress HeadParser::parse(std::string_view buf, const Limits& limits, Head& head, size_t& head_bytes,
                           Error& error) {
  // Empty lines before the request line are skipped (RFC 9112 2.2).
  size_t lead = 0;
  while (lead < buf.size() && (buf[lead] == '\r' || buf[lead] == '\n')) ++lead;
  if (lead > 64) return fail(error, 400, "too many empty lines before the request line");
  size_t end = std::string_view::npos;
  for (size_t i = std::max(scanned, lead + 1); i < buf.size(); ++i) {
    if (buf[i] != '\n') continue;
    if (buf[i - 1] == '\n' || (i >= lead + 2 && buf[i - 1] == '\r' && buf[i - 2] == '\n')) {
      end = i + 1;
      break;
    }
  }
  if (end == std::string_view::npos) {
    scanned = buf.size();
    if (buf.size() - lead > limits.max_head_bytes)
      return fail(error, 431, "the request head is over " + std::to_string(limits.max_head_bytes) + " bytes");
    return Progress::kNeedMore;
  }
  if (end - lead > limits.max_head_bytes)
    return fail(error, 431, "the request head is over " + std::to_string(limits.max_head_bytes) + " bytes");

  head = Head{};
  std::vector<std::string_view> lines;
  {
    std::string_view text = buf.substr(lead, end - lead);
    while (!text.empty()) {
      const size_t nl = text.find('\n');
      std::string_view line = text.substr(0, nl);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line.empty()) break;  // the blank line that ends the head
      lines.push_back(line);
      text.remove_prefix(nl + 1);
    }
  }
  if (lines.empty()) return fail(error, 400, "empty request");
  if (lines.size() - 1 > limits.max_headers)
    return fail(error, 431, "more than " + std::to_string(limits.max_headers) + " header fields");

  // Request line: method SP target SP version, single spaces.
  const std::string_view rl = lines[0];
  const size_t sp1 = rl.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : rl.find(' ', sp1 + 1);
  if (sp1 == std::string_view::npos || sp2 == std::string_view::npos || rl.find(' ', sp2 + 1) != std::string_view::npos)
    return fail(error, 400, "malformed request line");
  const std::string_view method = rl.substr(0, sp1), target = rl.substr(sp1 + 1, sp2 - sp1 - 1),
                         version = rl.substr(sp2 + 1);
  if (method.empty() || !std::all_of(method.begin(), method.end(), [](char c) { return is_tchar((unsigned char)c); }))
    return fail(error, 400, "malformed request method");
  if (target.empty() || !std::all_of(target.begin(), target.end(), [](char c) { return c > 0x20 && c < 0x7f; }))
    return fail(error, 400, "malformed request target");
  if (version.size() != 8 || version.substr(0, 5) != "HTTP/" || !std::isdigit((unsigned char)version[5]) ||
      version[6] != '.' || !std::isdigit((unsigned char)version[7]))
    return fail(error, 400, "malformed HTTP version");
  if (version[5] != '1') return fail(error, 505, "only HTTP/1.0 and HTTP/1.1 are served");
  head.method = std::string(method);
  head.target = std::string(target);
  head.minor_version = version[7] - '0';
  const size_t q = target.find('?');
  head.path = percent_decode(target.substr(0, q));
  if (q != std::string_view::npos) head.query = std::string(target.substr(q + 1));

  for (size_t i = 1; i < lines.size(); ++i) {
    const std::string_view line = lines[i];
    if (line[0] == ' ' || line[0] == '\t') return fail(error, 400, "obsolete header line folding");
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0) return fail(error, 400, "malformed header field");
    const std::string_view name = line.substr(0, colon);
    if (!std::all_of(name.begin(), name.end(), [](char c) { return is_tchar((unsigned char)c); }))
      return fail(error, 400, "malformed header field name");
    const std::string_view value = trim(line.substr(colon + 1));
    for (char c : value) {
      const unsigned char u = (unsigned char)c;
      if ((u < 0x20 && c != '\t') || u == 0x7f) return fail(error, 400, "control character in a header value");
    }
    head.headers.emplace_back(std::string(name), std::string(value));
  }

  // Framing (RFC 9112 6): Content-Length must be one number, however often it is repeated;
  // Transfer-Encoding must end in chunked and cannot be combined with Content-Length.
  bool have_length = false, te_seen = false;
  std::vector<std::string> codings;
  uint64_t length = 0;
  for (const auto& [name, value] : head.headers) {
    if (iequals(name, "Content-Length")) {
      bool bad = false;
      for_each_element(value, [&](std::string_view item) {
        if (item.size() > 18 || !std::all_of(item.begin(), item.end(), [](char c) { return c >= '0' && c <= '9'; })) {
          bad = true;
          return;
        }
        const uint64_t n = std::stoull(std::string(item));
        if (have_length && n != length) bad = true;
        have_length = true;
        length = n;
      });
      if (bad || !have_length) return fail(error, 400, "malformed or conflicting Content-Length");
    } else if (iequals(name, "Transfer-Encoding")) {
      te_seen = true;
      for_each_element(value, [&](std::string_view item) { codings.emplace_back(item); });
    } else if (iequals(name, "Connection")) {
      for_each_element(value, [&](std::string_view item) {
        if (iequals(item, "close")) head.keep_alive = false;
      });
    } else if (iequals(name, "Expect")) {
      if (!iequals(value, "100-continue")) return fail(error, 417, "unsupported Expect value");
      head.expect_continue = true;
    }
  }
  if (head.minor_version == 0) {
    // HTTP/1.0 closes unless the client asked to keep the connection.
    bool keep = false;
    for (const auto& [name, value] : head.headers)
      if (iequals(name, "Connection"))
        for_each_element(value, [&](std::string_view item) { keep |= iequals(item, "keep-alive"); });
    head.keep_alive = head.keep_alive && keep;
  }
  if (te_seen) {
    if (have_length) return fail(error, 400, "both Transfer-Encoding and Content-Length");
    if (head.minor_version == 0) return fail(error, 400, "Transfer-Encoding in an HTTP/1.0 request");
    if (codings.empty() || !iequals(codings.back(), "chunked")) return fail(error, 400, "the request body is not chunked");
    if (codings.size() != 1) return fail(error, 501, "unsupported transfer coding");
    head.chunked = true;
  }
  head.content_length = length;
  head_bytes = end;
  return Progress::kDone;
}

Progress ChunkedDecoder::feed(std::string_view buf, size_t body_limit, std::string& body, size_t& consumed,
                              Error& error) {
  constexpr size_t kMaxLine = 1024, kMaxTrailer = 8192;
  for (;;) {
    switch (state_) {
      case State::kSize: {
        const size_t nl = buf.find('\n', pos_);
        if (nl == std::string_view::npos) {
          if (buf.size() - pos_ > kMaxLine) return fail(error, 400, "chunk size line too long");
          return Progress::kNeedMore;
        }
        std::string_view line = buf.substr(pos_, nl - pos_);
        if (line.size() > kMaxLine) return fail(error, 400, "chunk size line too long");
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        line = line.substr(0, line.find(';'));  // chunk extensions are ignored
        while (!line.empty() && (line.back() == ' ' || line.back() == '\t')) line.remove_suffix(1);
        if (line.empty() || line.size() > 15) return fail(error, 400, "malformed chunk size");
        uint64_t size = 0;
        for (char c : line) {
          const int h = hex_value(c);
          if (h < 0) return fail(error, 400, "malformed chunk size");
          size = size * 16 + uint64_t(h);
        }
        pos_ = nl + 1;
        if (size == 0) {
          state_ = State::kTrailer;
          break;
        }
        if (size > body_limit || body.size() + size > body_limit)
          return fail(error, 413, "the request body is over the size limit");
        remaining_ = size;
        state_ = State::kData;
        break;
      }
      case State::kData: {
        const size_t take = size_t(std::min<uint64_t>(remaining_, buf.size() - pos_));
        body.append(buf.data() + pos_, take);
        pos_ += take;
        remaining_ -= take;
        if (remaining_ > 0) return Progress::kNeedMore;
        state_ = State::kDataEnd;
        break;
      }
      case State::kDataEnd: {
        if (pos_ >= buf.size()) return Progress::kNeedMore;
        if (buf[pos_] == '\n') {
          pos_ += 1;
        } else if (buf[pos_] == '\r') {
          if (pos_ + 1 >= buf.size()) return Progress::kNeedMore;
          if (buf[pos_ + 1] != '\n') return fail(error, 400, "malformed chunk end");
          pos_ += 2;
        } else {
          return fail(error, 400, "chunk data longer than its size");
        }
        state_ = State::kSize;
        break;
      }
      case State::kTrailer: {
        const size_t nl = buf.find('\n', pos_);
        if (nl == std::string_view::npos) {
          if (buf.size() - pos_ > kMaxTrailer) return fail(error, 431, "chunked trailer too long");
          return Progress::kNeedMore;
        }
        std::string_view line = buf.substr(pos_, nl - pos_);
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        pos_ = nl + 1;
        if (line.empty()) {
          state_ = State::kDone;
          consumed = pos_;
          return Progress::kDone;
        }
        break;
      }
      case State::kDone:
        consumed = pos_;
        return Progress::kDone;
    }
  }
}

}  // namespace deepinfer::server::http
