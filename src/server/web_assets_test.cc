#include "server/web_assets.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace omnibus::server {
namespace {

// web_assets.cc is generated from src/server/web/* at build time
// (src/server/web/embed.py); this holds the generator to its sources.
TEST(WebAssets, EmbeddedFilesMatchTheSources) {
  ASSERT_FALSE(web_assets().empty());
  for (const WebAsset& a : web_assets()) {
    std::ifstream in(std::string(OMNIBUS_SOURCE_DIR) + "/src/server/web" + std::string(a.path),
                     std::ios::binary);
    ASSERT_TRUE(in) << a.path;
    std::stringstream ss;
    ss << in.rdbuf();
    EXPECT_EQ(ss.str(), a.body) << a.path;
  }
}

TEST(WebAssets, Lookup) {
  const WebAsset* index = find_web_asset("/index.html");
  ASSERT_NE(index, nullptr);
  EXPECT_EQ(index->content_type.substr(0, 9), "text/html");
  EXPECT_EQ(find_web_asset("/nope.html"), nullptr);
  EXPECT_EQ(find_web_asset("/../CMakeLists.txt"), nullptr);
}

}  // namespace
}  // namespace omnibus::server
