#include "server/webui.h"

#include <stdexcept>

namespace deepinfer::server {

std::string webui_content_type(const std::string& name) {
  auto ends = [&](const char* ext) {
    const std::string e(ext);
    return name.size() >= e.size() && name.compare(name.size() - e.size(), e.size(), e) == 0;
  };
  if (ends(".html")) return "text/html; charset=utf-8";
  if (ends(".css")) return "text/css; charset=utf-8";
  if (ends(".js")) return "text/javascript; charset=utf-8";
  throw std::logic_error("webui: no content type for " + name);
}

void send_webui_asset(const WebAsset& a, httplib::Response& res) {
  res.status = 200;
  res.set_content(std::string(reinterpret_cast<const char*>(a.data), a.size), webui_content_type(a.name));
  res.set_header("Content-Security-Policy", kWebuiCsp);
  res.set_header("X-Content-Type-Options", "nosniff");
  res.set_header("Referrer-Policy", "no-referrer");
  // The files change with the binary: revalidate rather than run a stale page against a new server.
  res.set_header("Cache-Control", "no-cache");
}

}  // namespace deepinfer::server
