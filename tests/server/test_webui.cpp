// The chat page routes (src/server/webui.h): served at / without the API key and while the
// model loads, with its Content-Type and the Content-Security-Policy; the bytes are the
// source files exactly; --no-webui (ServerOptions::webui = false) makes / a 404.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include <httplib.h>

#include "server/server.h"
#include "server/webui.h"
#include "server_harness.h"

using namespace deepinfer;
using namespace deepinfer::testing;

namespace {

std::string source_file(const std::string& name) {
  const std::string path = std::string(DI_TEST_DATA_DIR) + "/../../src/server/webui/" + name;
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f) << "cannot open " << path;
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

const server::WebAsset* asset(const std::string& name) {
  for (const server::WebAsset& a : server::webui_assets())
    if (name == a.name) return &a;
  return nullptr;
}

}  // namespace

TEST(WebUi, EmbeddedFilesAreTheSourcesByteForByte) {
  std::set<std::string> names;
  for (const server::WebAsset& a : server::webui_assets()) {
    EXPECT_TRUE(names.insert(a.name).second) << "twice: " << a.name;
    EXPECT_NO_THROW(server::webui_content_type(a.name)) << a.name;
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(a.data), a.size), source_file(a.name)) << a.name;
  }
  EXPECT_EQ(names, (std::set<std::string>{"index.html", "app.css", "app.js"}));
  EXPECT_THROW(server::webui_content_type("secrets.txt"), std::logic_error);
}

// The policy forbids inline script and style: the page must not need them.
TEST(WebUi, PageHasNoInlineScriptOrStyle) {
  const server::WebAsset* index = asset("index.html");
  ASSERT_NE(index, nullptr);
  const std::string html(reinterpret_cast<const char*>(index->data), index->size);
  EXPECT_FALSE(std::regex_search(html, std::regex(R"(<script(?![^>]*\bsrc=)[^>]*>)", std::regex::icase)));
  EXPECT_FALSE(std::regex_search(html, std::regex(R"(\son[a-z]+\s*=)", std::regex::icase)));
  EXPECT_FALSE(std::regex_search(html, std::regex(R"(\sstyle\s*=|<style)", std::regex::icase)));
  EXPECT_NE(html.find("src=\"app.js\""), std::string::npos);
  EXPECT_NE(html.find("href=\"app.css\""), std::string::npos);
}

TEST(WebUi, ServedWithoutKeyWhileLoadingWithPolicy) {
  server::ServerOptions so;
  so.api_key = "sekrit";
  Running srv(so, nullptr);  // no backend: the model is still loading
  auto c = srv.client();
  auto root = c.Get("/");
  ASSERT_TRUE(root);
  EXPECT_EQ(root->status, 200);
  EXPECT_EQ(root->get_header_value("Content-Type"), "text/html; charset=utf-8");
  const std::string csp = root->get_header_value("Content-Security-Policy");
  EXPECT_EQ(csp, server::kWebuiCsp);
  EXPECT_NE(csp.find("connect-src 'self'"), std::string::npos);
  EXPECT_NE(csp.find("script-src 'self'"), std::string::npos);
  EXPECT_NE(csp.find("default-src 'none'"), std::string::npos);
  EXPECT_EQ(csp.find("unsafe"), std::string::npos);
  EXPECT_EQ(root->get_header_value("X-Content-Type-Options"), "nosniff");
  EXPECT_EQ(root->body, source_file("index.html"));

  auto index = c.Get("/index.html");
  ASSERT_TRUE(index);
  EXPECT_EQ(index->status, 200);
  EXPECT_EQ(index->body, root->body);
  auto js = c.Get("/app.js");
  ASSERT_TRUE(js);
  EXPECT_EQ(js->status, 200);
  EXPECT_EQ(js->get_header_value("Content-Type"), "text/javascript; charset=utf-8");
  EXPECT_EQ(js->get_header_value("Content-Security-Policy"), server::kWebuiCsp);
  auto css = c.Get("/app.css");
  ASSERT_TRUE(css);
  EXPECT_EQ(css->get_header_value("Content-Type"), "text/css; charset=utf-8");

  // The API itself still wants the key; other paths and methods are plain errors.
  EXPECT_EQ(c.Get("/v1/models")->status, 401);
  EXPECT_EQ(c.Get("/app.json")->status, 404);
  EXPECT_NE(c.Get("/../index.html")->status, 200);
  EXPECT_EQ(c.Post("/", "{}", "application/json")->status, 405);
}

TEST(WebUi, NoWebuiMakesThePageA404) {
  server::ServerOptions so;
  so.webui = false;
  Running srv(so, nullptr);
  auto c = srv.client();
  for (const char* path : {"/", "/index.html", "/app.js", "/app.css"}) {
    auto r = c.Get(path);
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 404) << path;
    EXPECT_EQ(r->get_header_value("Content-Type"), "application/json") << path;
    EXPECT_NE(r->body.find("no route GET"), std::string::npos) << r->body;
  }
}
