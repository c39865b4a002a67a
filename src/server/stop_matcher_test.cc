#include "server/stop_matcher.h"

#include <gtest/gtest.h>

namespace omnibus::server {
namespace {

// Feeds pieces one by one; returns everything emitted (flushing at the end if not stopped).
std::string run(StopMatcher& m, const std::vector<std::string>& pieces,
                std::vector<std::string>* emitted = nullptr) {
  std::string out;
  for (const std::string& p : pieces) {
    std::string e = m.push(p);
    if (emitted) emitted->push_back(e);
    out += e;
    if (m.stopped()) return out;
  }
  return out + m.flush();
}

TEST(StopMatcher, NoStopsPassesThrough) {
  StopMatcher m({});
  EXPECT_EQ(m.push("Hello"), "Hello");
  EXPECT_EQ(m.push(" world"), " world");
  EXPECT_FALSE(m.stopped());
  EXPECT_EQ(m.flush(), "");
}

TEST(StopMatcher, StopInsideOnePiece) {
  StopMatcher m({"END"});
  EXPECT_EQ(m.push("abcENDdef"), "abc");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.push("more"), "");
  EXPECT_EQ(m.flush(), "");
}

TEST(StopMatcher, StopSplitAcrossPiecesIsNeverEmitted) {
  StopMatcher m({"\n\nUser:"});
  std::vector<std::string> emitted;
  const std::string out = run(m, {"Hi", " there", "\n", "\nUs", "er", ":", " ignored"}, &emitted);
  EXPECT_EQ(out, "Hi there");
  EXPECT_TRUE(m.stopped());
  for (const std::string& e : emitted)
    EXPECT_EQ(e.find('\n'), std::string::npos) << "leaked part of the stop string";
}

TEST(StopMatcher, HeldBackTextIsReleasedWhenItDiverges) {
  StopMatcher m({"STOP"});
  EXPECT_EQ(m.push("aST"), "a");
  EXPECT_EQ(m.push("x"), "STx");
  EXPECT_FALSE(m.stopped());
  EXPECT_EQ(m.push("STO"), "");
  EXPECT_EQ(m.flush(), "STO");  // ended without the stop: the tail is text
}

TEST(StopMatcher, EarliestOfSeveralStopsWins) {
  StopMatcher m({"world", "lo w"});
  EXPECT_EQ(run(m, {"hello world"}), "hel");
  EXPECT_EQ(m.matched(), "lo w");  // the one the text ended on, not the first listed
}

TEST(StopMatcher, MatchedIsEmptyWithoutAStop) {
  StopMatcher m({"END"});
  EXPECT_EQ(run(m, {"no stop here"}), "no stop here");
  EXPECT_EQ(m.matched(), "");
}

TEST(StopMatcher, OverlappingPrefixHeldOnlyAsLongAsNeeded) {
  StopMatcher m({"aab"});
  EXPECT_EQ(m.push("aa"), "");
  EXPECT_EQ(m.push("a"), "a");  // "aaa": only "aa" can still start "aab"
  EXPECT_EQ(m.push("b"), "");
  EXPECT_TRUE(m.stopped());
}

TEST(StopMatcher, MultibyteStopKeepsCharactersWhole) {
  StopMatcher m({"é!"});  // 0xC3 0xA9 '!'
  EXPECT_EQ(m.push("caf\xC3\xA9"), "caf");
  EXPECT_EQ(m.push("?"), "\xC3\xA9?");
  EXPECT_EQ(m.push("\xC3\xA9!"), "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.n_emitted(), 6u);
}

}  // namespace
}  // namespace omnibus::server
