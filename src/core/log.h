// Progress and diagnostics go to stderr, so stdout stays machine-readable
// (token ids, JSON) for the tools that parse it.
#pragma once

namespace deepinfer {

void log_info(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void log_warn(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
// Text put before every line from now on (a multi-process run's "rank 1: "); copied.
void set_log_prefix(const char* prefix);

}  // namespace deepinfer
