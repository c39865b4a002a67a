// StopMatcher: finds stop strings in a stream of generated text without ever
// letting part of one reach the client.
//
// push(text) returns the text that is now safe to send: everything before the
// earliest complete stop string (then stopped() is true and the stop string and
// all that follows are dropped), minus a held-back tail that could still be
// the beginning of a stop string. flush() returns the held-back tail when the
// sequence ends without a stop.
//
//   pending = "...safe part...|tail"   tail = the longest suffix of pending that is
//                                      a proper prefix of some stop string
//
// Stop strings are valid UTF-8 and so start with a lead byte: the tail starts
// on a character boundary, and what push() returns never splits a character
// when its input does not.
//
// Thread-safety: one stream, one thread.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace omnibus::server {

class StopMatcher {
 public:
  // REQUIRES: no stop string is empty.
  explicit StopMatcher(std::vector<std::string> stops);

  std::string push(std::string_view text);
  std::string flush();
  bool stopped() const { return stopped_; }
  // The stop string that ended the text ("" until stopped(); the earliest in
  // the text, the first listed of those ending there).
  const std::string& matched() const { return matched_; }
  // Bytes returned so far (by push and flush).
  size_t n_emitted() const { return n_emitted_; }

 private:
  const std::vector<std::string> stops_;
  std::string pending_;  // not returned yet: a possible stop-string start
  bool stopped_ = false;
  std::string matched_;
  size_t n_emitted_ = 0;
};

}  // namespace omnibus::server
