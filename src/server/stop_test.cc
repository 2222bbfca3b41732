#include "server/stop.h"

#include <gtest/gtest.h>

namespace strata::server {
namespace {

// Feeds pieces one by one and returns everything sent, and whether a stop string was hit.
std::pair<std::string, bool> run(StopMatcher& m, const std::vector<std::string>& pieces) {
  std::string sent;
  for (const std::string& p : pieces) {
    StopMatcher::Out o = m.push(p);
    sent += o.text;
    if (o.stopped) return {sent, true};
  }
  return {sent + m.flush(), false};
}

TEST(ServerStop, NoStopsPassesEverything) {
  StopMatcher m;
  EXPECT_EQ(run(m, {"a", "bc", "d"}), std::make_pair(std::string("abcd"), false));
}

TEST(ServerStop, StopSplitAcrossPiecesIsNeverSent) {
  StopMatcher m({"END"});
  StopMatcher::Out o = m.push("hello E");
  EXPECT_EQ(o.text, "hello ");
  EXPECT_FALSE(o.stopped);
  o = m.push("N");
  EXPECT_EQ(o.text, "");
  o = m.push("D and more");
  EXPECT_EQ(o.text, "");
  EXPECT_TRUE(o.stopped);
}

TEST(ServerStop, FalseStartIsReleased) {
  StopMatcher m({"END"});
  EXPECT_EQ(m.push("xE").text, "x");
  EXPECT_EQ(m.push("Nx").text, "ENx");
  EXPECT_EQ(m.flush(), "");
}

TEST(ServerStop, EarliestOfSeveralStopsWins) {
  StopMatcher m({"world", "lo"});
  auto [sent, stopped] = run(m, {"hello world"});
  EXPECT_EQ(sent, "hel");
  EXPECT_TRUE(stopped);
}

TEST(ServerStop, HeldTextIsFlushedAtTheEnd) {
  StopMatcher m({"\n\n"});
  auto [sent, stopped] = run(m, {"line\n"});
  EXPECT_EQ(sent, "line\n");
  EXPECT_FALSE(stopped);
}

TEST(ServerStop, EmptyStopStringsAreIgnored) {
  StopMatcher m({""});
  EXPECT_EQ(run(m, {"abc"}), std::make_pair(std::string("abc"), false));
}

}  // namespace
}  // namespace strata::server
