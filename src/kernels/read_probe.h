// ReadProbe: how many bytes per second n threads read from DRAM on this
// machine right now, the ceiling of single-stream decode (which reads every
// weight once a token). `omnibus bench --read-probe` takes it after each
// decode run, so a decode's GiB/s and the probe it is judged against come
// from the same process and the same minute (issue 35: decode at >= 95% of
// the read probe); kernels_microbench's BM_ReadBandwidth reads with the same
// loops (read_probe_sum), one shape per run.
//
// The buffer is on transparent huge pages (as the packed weights are,
// kernels/matmul.cc) and touched once at construction, so a measurement reads
// resident memory only. Each thread sums its own contiguous slice (a
// sequential stream, as a one-token matmul's slice of rows is).
//
// Thread-safety: measure() may be called from one thread at a time; it starts
// and joins its own threads (not the engine's pool, which the engine thread
// owns).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>

namespace omnibus {

// How a pass reads: four register accumulators (kTight: loads issued as
// fast as the core can), accumulators kept in memory (kPaced: a store per
// load, reads issued more slowly), or kTight with a software prefetch into
// L2 1 KB ahead (kPrefetched). Which reads most depends on the machine: on a
// Sapphire Rapids Xeon kPaced read 12-13% more than kTight, whose rate moved
// by as much with where the linker placed its loop (docs/performance.md,
// round (r)), and kPrefetched 15-20% more than kTight in every shape and
// placement tried (round (s)). measure() takes the best of the three.
enum class ReadShape { kTight, kPaced, kPrefetched };

// The sum of the 64-bit little-endian words of p[0, n) (mod 2^64); n % 128 ==
// 0, p 32-byte aligned. AVX2 where the CPU has it (either shape), else a
// scalar loop; all give the same sum (the result only keeps the reads from
// being optimised away, and the test holds them together).
uint64_t read_probe_sum(const uint8_t* p, size_t n, ReadShape shape = ReadShape::kTight);
uint64_t read_probe_sum_scalar(const uint8_t* p, size_t n);
// kTight's loop with a software prefetch `ahead` bytes on (0: none) into L2
// (into_l2) or L1: kPrefetched at other distances, for the sweep that chose
// its distance (kernels_microbench ReadPrefetchSweep). The same sum.
uint64_t read_probe_sum_prefetching(const uint8_t* p, size_t n, size_t ahead, bool into_l2);

// The read probe's loops over memory it does not own: each of n_threads
// threads reads its contiguous share of every span in turn (whole 128-byte
// steps of span / n_threads; a span's last < 128 x n_threads bytes are not
// read), as a one-token matmul's threads each stream their region of every
// matrix. Returns the fastest of `passes` passes in each ReadShape as the
// seconds one pass took, and sets *bytes to the bytes a pass reads. For
// `bench --read-probe` over the packed weights (kernels/matmul.h,
// live_packed_weights): where the host places a buffer decides its speed on
// some VMs (docs/performance.md, round (ad)), so the probe the decode is
// judged against should read the decode's own pages. Spans must be 32-byte
// aligned. Thread-safety: starts and joins its own threads.
double read_spans(std::span<const std::span<const uint8_t>> spans, int n_threads, int passes,
                  size_t* bytes);

class ReadProbe {
 public:
  static constexpr size_t kDefaultBytes = size_t(1) << 30;  // far beyond any L3 here

  // Allocates `bytes` (rounded down to whole 2 MiB) on transparent huge pages
  // (or, huge_pages false, on 4 KiB pages: kernels_microbench's lower
  // figure) and touches every page. Aborts on allocation failure (a probe is
  // a tool).
  explicit ReadProbe(size_t bytes = kDefaultBytes, bool huge_pages = true);
  ~ReadProbe();
  ReadProbe(const ReadProbe&) = delete;
  ReadProbe& operator=(const ReadProbe&) = delete;

  // Reads the whole buffer `passes` times in each ReadShape with n_threads
  // threads (one slice each); returns the fastest pass's bytes per second (a
  // ceiling: a slower pass is another process's interference or a loop's
  // pace, not the memory's limit).
  double measure(int n_threads, int passes = 3) const;

  // One pass of measure: the seconds n_threads threads take to read their
  // slices (pass_bytes in all), each slice's sum checked.
  double read_pass(int n_threads, ReadShape shape = ReadShape::kTight) const;
  // The same with read_probe_sum_prefetching's loop.
  double read_pass_prefetching(int n_threads, size_t ahead, bool into_l2) const;
  size_t pass_bytes(int n_threads) const;

  size_t bytes() const { return bytes_; }

 private:
  // One timed pass, each slice summed by sum(slice start, slice bytes).
  double timed_pass(int n_threads,
                    const std::function<uint64_t(const uint8_t*, size_t)>& sum) const;

  uint8_t* buf_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace omnibus
