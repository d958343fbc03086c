#include "core/log.h"

#include <chrono>
#include <cstdarg>
#include <cstdio>

namespace deepinfer {

static double seconds_since_start() {
  static const auto t0 = std::chrono::steady_clock::now();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

static char g_prefix[64] = "";

void set_log_prefix(const char* prefix) { std::snprintf(g_prefix, sizeof g_prefix, "%s", prefix); }

static void vlog(const char* level, const char* fmt, va_list ap) {
  std::fprintf(stderr, "[%8.3f] %s %s", seconds_since_start(), level, g_prefix);
  std::vfprintf(stderr, fmt, ap);
  std::fputc('\n', stderr);
}

void log_info(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vlog("info", fmt, ap);
  va_end(ap);
}

void log_warn(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vlog("warn", fmt, ap);
  va_end(ap);
}

}  // namespace deepinfer
