// The chat page served at / (src/server/webui/: index.html, app.css, app.js), embedded in the
// binary at build time by cmake/embed_files.cmake. `deepinfer serve --no-webui` leaves it out.
#pragma once
#include <httplib.h>

#include <cstddef>
#include <span>
#include <string>

namespace deepinfer::server {

struct WebAsset {
  const char* name;  // file name, served as /name
  const unsigned char* data;
  size_t size;
};

// Every embedded file (defined in the generated webui_assets.cpp).
std::span<const WebAsset> webui_assets();

// The page may load only its own files and call only its own server; model text reaches the
// DOM as text, and this policy is the second line should that ever fail.
inline constexpr const char* kWebuiCsp =
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

// The Content-Type of an embedded file, from its extension; throws std::logic_error for an
// extension the page has no business serving.
std::string webui_content_type(const std::string& name);

// The file with its Content-Type and the security headers (CSP, nosniff, no referrer).
void send_webui_asset(const WebAsset& a, httplib::Response& res);

}  // namespace deepinfer::server
