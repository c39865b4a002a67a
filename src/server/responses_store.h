// ResponsesStore: the responses kept for GET /v1/responses/{id},
// DELETE /v1/responses/{id} and previous_response_id — a bounded in-memory
// LRU map from response id to the Response object and the conversation it
// ended (chat messages, instructions excluded, the answer included), so a
// follow-up renders the same prefix and hits the prefix cache. When full,
// put() evicts the least recently used entry; an evicted or deleted id is
// simply unknown (the API answers 404). Capacity 0 stores nothing.
//
// Thread-safety: every method may be called from any thread (one mutex).
#pragma once

#include <cstddef>
#include <list>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_map>

namespace omnibus::server {

class ResponsesStore {
 public:
  struct Entry {
    nlohmann::json response;      // the Response object
    nlohmann::json conversation;  // chat messages, for previous_response_id
  };

  explicit ResponsesStore(size_t capacity) : capacity_(capacity) {}

  void put(const std::string& id, Entry e);
  // A copy (the entry may be evicted meanwhile); marks it recently used.
  std::optional<Entry> get(const std::string& id);
  // True when it was there.
  bool erase(const std::string& id);
  size_t size() const;
  size_t capacity() const { return capacity_; }

 private:
  using Lru = std::list<std::pair<std::string, Entry>>;  // most recent first
  const size_t capacity_;
  mutable std::mutex mu_;
  Lru lru_;                                               // guarded by mu_
  std::unordered_map<std::string, Lru::iterator> index_;  // guarded by mu_
};

}  // namespace omnibus::server
