// Bounded best-k selection in one pass: the logprob listings (logprobs.cc,
// the sampler's raw logprobs) and the sampler's top-k stage keep the k best
// items of a vocabulary-sized scan in a k-entry heap, so most items cost one
// comparison.
//
// Thread-safety: pure functions on the caller's vector.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace omnibus {

// Offers `item` to `heap`, which holds the best (at most k) items offered so
// far under `better` (a strict total order, "a before b"), the worst of them
// at heap.front(). After the scan, std::sort_heap(heap.begin(), heap.end(),
// better) lists them best first. REQUIRES: k >= 1.
template <typename T, typename Better>
inline void offer_to_top_k(std::vector<T>& heap, size_t k, const T& item, Better better) {
  if (heap.size() < k) {
    heap.push_back(item);
    std::push_heap(heap.begin(), heap.end(), better);
  } else if (better(item, heap.front())) {
    std::pop_heap(heap.begin(), heap.end(), better);
    heap.back() = item;
    std::push_heap(heap.begin(), heap.end(), better);
  }
}

}  // namespace omnibus
