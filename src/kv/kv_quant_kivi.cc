// kivi2 store path and residual-slot bookkeeping (see kv_quant_kivi.h).
#include "kv/kv_quant_kivi.h"

#include <algorithm>
#include <cstring>

#include "kernels/cpu_features.h"
#include "kv/attention_internal.h"
#include "kv/kv_quant.h"
#include "kv/kv_quant_paged.h"
#include "util/check.h"
#include "util/fp16.h"

namespace omnibus {
namespace {

void to_f32(const uint16_t* h, float* y, int n) {
  if (cpu_features().use_avx2()) return load_f16_avx2(h, y, n);  // exact either way
  for (int i = 0; i < n; ++i) y[i] = fp16_to_fp32(h[i]);
}

void to_f16(const float* x, uint16_t* h, int64_t n) {
  if (cpu_features().use_avx2()) return store_f16_avx2(x, h, n);
  for (int64_t i = 0; i < n; ++i) h[i] = fp32_to_fp16(x[i]);
}

}  // namespace

KiviResidual::KiviResidual(int64_t n_blocks, int n_kv_heads, int block_size, int head_dim,
                           int n_slots, KiviStaging* staging, int residual_blocks)
    : n_kv_(n_kv_heads),
      bs_(block_size),
      hd_(head_dim),
      n_slots_(n_slots),
      residual_blocks_(residual_blocks),
      staging_(staging) {
  OMNIBUS_CHECK(n_slots >= 0 && n_blocks >= 1 && staging != nullptr && residual_blocks >= 0);
  const size_t slot_elems = size_t(n_kv_heads) * block_size * head_dim;
  k_.assign(slot_elems * n_slots, 0);
  v_.assign(slot_elems * n_slots, 0);
  slot_of_.assign(size_t(n_blocks), -1);
  owner_.assign(size_t(n_slots), -1);
  fill_.assign(size_t(n_slots), 0);
  stamp_.assign(size_t(n_slots), 0);
  retained_.assign(size_t(n_slots), 0);
  free_.reserve(size_t(n_slots));
  for (int32_t s = n_slots - 1; s >= 0; --s) free_.push_back(s);
  pending_.reserve(size_t(n_slots));
}

size_t KiviResidual::slot_bytes() const { return 2 * size_t(n_kv_) * bs_ * hd_ * sizeof(uint16_t); }

void KiviResidual::check_integrity() const {
  std::vector<uint8_t> is_free(size_t(n_slots_), 0);
  for (int32_t s : free_) {
    OMNIBUS_CHECK(s >= 0 && s < n_slots_ && !is_free[size_t(s)] && owner_[size_t(s)] < 0);
    is_free[size_t(s)] = 1;
  }
  for (int32_t s = 0; s < n_slots_; ++s) {
    const int64_t b = owner_[size_t(s)];
    OMNIBUS_CHECK(is_free[size_t(s)] == (b < 0));
    if (b >= 0) OMNIBUS_CHECK(slot_of_[size_t(b)] == s);
    if (retained_[size_t(s)])
      OMNIBUS_CHECK(b >= 0 && residual_blocks_ > 0 && fill_[size_t(s)] == bs_);
  }
  for (size_t b = 0; b < slot_of_.size(); ++b) {
    const int32_t s = slot_of_[b];
    if (s >= 0) OMNIBUS_CHECK(s < n_slots_ && owner_[size_t(s)] == int64_t(b));
  }
}

void KiviResidual::release(int32_t slot) {
  const int64_t b = owner_[size_t(slot)];
  if (b < 0) return;
  if (slot_of_[size_t(b)] == slot) slot_of_[size_t(b)] = -1;
  owner_[size_t(slot)] = -1;
  retained_[size_t(slot)] = 0;
  free_.push_back(slot);
}

void KiviResidual::unpin(int32_t slot) {
  if (residual_blocks_ > 0 && fill_[size_t(slot)] == bs_) {
    retained_[size_t(slot)] = 1;  // keeps a sealed block's rows for a later prefix-cache hit
  } else {
    release(slot);
  }
}

void KiviResidual::release_block(int64_t block) {
  const int32_t slot = slot_of_[size_t(block)];
  if (slot >= 0) unpin(slot);
}

void KiviResidual::pin(int64_t block) {
  const int32_t slot = slot_of_[size_t(block)];
  if (slot < 0) return;
  retained_[size_t(slot)] = 0;
  stamp_[size_t(slot)] = calls_;
}

void KiviResidual::begin_call() {
  ++calls_;
  for (const auto& [slot, block] : pending_) {
    if (owner_[size_t(slot)] == block) unpin(slot);  // else taken meanwhile
  }
  pending_.clear();
}

int32_t KiviResidual::lru_retained(int32_t avoid) const {
  int32_t best = -1;
  for (int32_t s = 0; s < n_slots_; ++s) {
    if (s != avoid && retained_[size_t(s)] &&
        (best < 0 || stamp_[size_t(s)] < stamp_[size_t(best)]))
      best = s;
  }
  return best;
}

int32_t KiviResidual::take_spare(int32_t avoid) {
  int32_t slot = -1;
  if (!free_.empty()) {
    slot = free_.back();
    free_.pop_back();
  } else if ((slot = lru_retained(avoid)) >=
             0) {  // a sealed block left behind: read quantized from now on
    slot_of_[size_t(owner_[size_t(slot)])] = -1;
  }
  return slot;
}

bool KiviResidual::adopt_rows(int64_t block, const uint16_t* k, const uint16_t* v) {
  OMNIBUS_CHECK(residual_blocks_ > 0 && block >= 0 && size_t(block) < slot_of_.size());
  if (pins(block)) return holds_rows(block);  // read by a running sequence: the same rows
  int32_t slot = slot_of_[size_t(block)];     // retained: stale (an earlier life) or the same rows
  if (slot < 0) {
    slot = take_spare(-1);
    if (slot < 0) return false;
    owner_[size_t(slot)] = block;
    slot_of_[size_t(block)] = slot;
  }
  const size_t elems = size_t(n_kv_) * bs_ * hd_;
  std::memcpy(row(slot, false, 0, 0), k, elems * sizeof(uint16_t));
  std::memcpy(row(slot, true, 0, 0), v, elems * sizeof(uint16_t));
  fill_[size_t(slot)] = bs_;
  stamp_[size_t(slot)] = calls_;
  retained_[size_t(slot)] = 1;
  return true;
}

int32_t KiviResidual::claim(const PagedKvLayer& kv, int64_t block, int32_t avoid, bool soft) {
  int32_t slot = take_spare(avoid);
  if (slot < 0 && soft) return -1;
  if (slot < 0) {
    // Steal the least recently written slot not written in this call.
    uint64_t best = calls_;
    for (int32_t s = 0; s < n_slots_; ++s) {
      if (s != avoid && owner_[size_t(s)] >= 0 && stamp_[size_t(s)] < best) {
        best = stamp_[size_t(s)];
        slot = s;
      }
    }
    if (slot < 0) {
      ++n_no_slot_;
      return -1;
    }
    ++n_steals_;
    const int64_t victim = owner_[size_t(slot)];
    if (kivi_k_state(kv_unit(kv, false, victim, 0)) == kKiviOpen) {
      const int bits = kv_kivi_bits(kv.format);
      std::vector<float> x(static_cast<size_t>(hd_));
      for (int h = 0; h < n_kv_; ++h) {
        uint8_t* ku = kv_unit(kv, false, victim, h);
        for (int r = 0; r < fill_[size_t(slot)]; ++r) {
          to_f32(row(slot, false, h, r), x.data(), hd_);
          kivi_k_store_row_per_token(ku, bs_, hd_, bits, r, x.data());
        }
        kivi_k_set_state(ku, kKiviPerToken);
      }
    }
    slot_of_[size_t(victim)] = -1;
  }
  owner_[size_t(slot)] = block;
  slot_of_[size_t(block)] = slot;
  fill_[size_t(slot)] = 0;
  stamp_[size_t(slot)] = calls_;
  retained_[size_t(slot)] = 0;
  return slot;
}

void kivi_store(const PagedKvLayer& kv, const AttentionSeq* seqs, int n_seqs, const float* k,
                const float* v) {
  KiviResidual& R = *kv.kivi;
  OMNIBUS_CHECK(R.n_kv_ == kv.n_kv_heads && R.bs_ == kv.block_size && R.hd_ == kv.head_dim);
  R.begin_call();
  const int bs = kv.block_size, hd = kv.head_dim, nkv = kv.n_kv_heads;
  const int bits = kv_kivi_bits(kv.format);
  const bool rotate_v = kv_rotates_v(kv.format);
  const int64_t row_elems = int64_t(nkv) * hd;

  // Stage the step's rows in fp16: every later read of them goes through fp16.
  int64_t n_tok = 0;
  for (int i = 0; i < n_seqs; ++i)
    n_tok = std::max<int64_t>(n_tok, seqs[i].first_token + seqs[i].n_tokens);
  KiviStaging& st = R.staging();
  if (st.k.size() < size_t(n_tok * row_elems)) {
    st.k.resize(size_t(n_tok * row_elems));
    st.v.resize(size_t(n_tok * row_elems));
  }
  to_f16(k, st.k.data(), n_tok * row_elems);
  if (rotate_v) {  // kivi2 values live rotated (H v) everywhere: staging, slots, blocks
    thread_local std::vector<float> vr;
    vr.assign(v, v + n_tok * row_elems);
    for (int64_t r = 0; r < n_tok * nkv; ++r) kv_hadamard(vr.data() + r * hd, hd);
    to_f16(vr.data(), st.v.data(), n_tok * row_elems);
  } else {
    to_f16(v, st.v.data(), n_tok * row_elems);
  }
  st.owner = &R;

  // Pin what this call's queries read from earlier calls: the window rows
  // below each sequence's n_past (after a prefix-cache hit, retained ones).
  // A sliding-window layer group's table has no block (< 0) where every
  // position is outside the window (kv/kv_layer_groups.h): nothing reads it.
  const int W = R.residual_blocks_;
  if (W > 0) {
    for (int i = 0; i < n_seqs; ++i) {
      const AttentionSeq& s = seqs[i];
      for (int32_t bi = kivi_qlim(s.n_past, bs, W) / bs; bi * bs < s.n_past; ++bi) {
        if (s.block_table[bi] >= 0) R.pin(s.block_table[bi]);
      }
    }
  }

  thread_local std::vector<float> xs;  // [bs, hd] f32 rows of one block
  xs.resize(size_t(bs) * hd);
  for (int i = 0; i < n_seqs; ++i) {
    const AttentionSeq& s = seqs[i];
    const int32_t end = s.n_past + s.n_tokens;
    for (int32_t p0 = s.n_past; p0 < end; p0 = (p0 / bs + 1) * bs) {
      const int64_t b = s.block_table[p0 / bs];
      const int r0 = p0 % bs;
      const int r1 = std::min<int32_t>(end - p0 / bs * bs, bs);
      // stage row of block row r: token s.first_token + (block start + r - n_past)
      auto stage = [&](bool is_v, int h, int r) {
        const int64_t t = s.first_token + (int64_t(p0 / bs) * bs + r - s.n_past);
        return (is_v ? st.v : st.k).data() + (t * nkv + h) * hd;
      };
      if (r0 == 0) {  // the block starts a new life (a stale slot is reused as it is)
        for (int h = 0; h < nkv; ++h) kivi_k_set_state(kv_unit(kv, false, b, h), kKiviOpen);
        R.pin(b);
      }
      for (int h = 0; h < nkv; ++h) {
        uint8_t* vu = kv_unit(kv, true, b, h);
        for (int r = r0; r < r1; ++r) {
          to_f32(stage(true, h, r), xs.data(), hd);
          if (rotate_v) {
            kivi_v_store_row(vu, bs, hd, r, xs.data());
          } else {
            q4_store_row(vu, bs, hd, r, xs.data());
          }
        }
      }
      const uint8_t state = kivi_k_state(kv_unit(kv, false, b, 0));
      int32_t slot = R.slot_of(b);
      if (state == kKiviOpen && r1 < bs && slot < 0) {
        slot = R.claim(kv, b, -1);
        if (slot < 0 || r0 > 0) {
          // No slot (or an open group whose earlier rows were lost, which
          // claim's conversions rule out): keys of this block per token.
          OMNIBUS_DCHECK(r0 == 0);
          for (int h = 0; h < nkv; ++h) kivi_k_set_state(kv_unit(kv, false, b, h), kKiviPerToken);
          if (slot >= 0) R.release(slot);
        }
      }
      const uint8_t st2 = kivi_k_state(kv_unit(kv, false, b, 0));
      if (st2 == kKiviPerToken || st2 == kKiviSealed) {
        for (int h = 0; h < nkv; ++h) {
          uint8_t* ku = kv_unit(kv, false, b, h);
          for (int r = r0; r < r1; ++r) {
            to_f32(stage(false, h, r), xs.data(), hd);
            if (st2 == kKiviPerToken) {
              kivi_k_store_row_per_token(ku, bs, hd, bits, r, xs.data());
            } else {
              kivi_k_store_row_sealed(ku, bs, hd, bits, r, xs.data());
            }
          }
        }
        continue;
      }
      if (r1 == bs) {  // the group is complete: seal it
        OMNIBUS_DCHECK(r0 == 0 || slot >= 0);
        if (W > 0) {
          // Keep the group's fp16 rows: later queries of this sequence read
          // them while it is in their window (then a steal is worth it), and
          // a prefix-cache hit ending here needs them (then only a spare slot).
          const bool read_later = p0 / bs >= kivi_qlim(end, bs, W) / bs;
          if (slot < 0) slot = R.claim(kv, b, -1, /*soft=*/!read_later);
          if (slot >= 0) {
            for (int h = 0; h < nkv; ++h) {
              for (int r = r0; r < bs; ++r) {
                std::memcpy(R.row(slot, false, h, r), stage(false, h, r), size_t(hd) * 2);
                std::memcpy(R.row(slot, true, h, r), stage(true, h, r), size_t(hd) * 2);
              }
            }
            R.fill_[size_t(slot)] = bs;
            // Left behind and written whole in this call (its queries read the
            // staging): any later claim, even of this call, may take it.
            if (!read_later && r0 == 0) R.retained_[size_t(slot)] = 1;
          }
        }
        for (int h = 0; h < nkv; ++h) {
          for (int r = 0; r < bs; ++r) {
            const uint16_t* src = r >= r0     ? stage(false, h, r)
                                  : slot >= 0 ? R.row(slot, false, h, r)
                                              : nullptr;
            if (src != nullptr) {
              to_f32(src, xs.data() + size_t(r) * hd, hd);
            } else {
              std::fill_n(xs.data() + size_t(r) * hd, hd, 0.f);
            }
          }
          kivi_k_seal(kv_unit(kv, false, b, h), bs, hd, bits, xs.data());
        }
        if (slot >= 0) {
          R.stamp_[size_t(slot)] = R.calls_;
          if (W == 0) R.pending_.emplace_back(slot, b);  // W > 0: released below once left behind
        }
        continue;
      }
      // Still open: keep the new rows in the block's slot.
      for (int h = 0; h < nkv; ++h) {
        for (int r = r0; r < r1; ++r) {
          std::memcpy(R.row(slot, false, h, r), stage(false, h, r), size_t(hd) * 2);
          std::memcpy(R.row(slot, true, h, r), stage(true, h, r), size_t(hd) * 2);
        }
      }
      R.fill_[size_t(slot)] = r1;
      R.stamp_[size_t(slot)] = R.calls_;
    }
    if (W > 0) {  // sealed blocks no later query of this sequence reads in fp16
      for (int32_t bi = kivi_qlim(s.n_past, bs, W) / bs; bi < kivi_qlim(end, bs, W) / bs; ++bi) {
        const int64_t b = s.block_table[bi];
        if (b >= 0 && R.slot_of(b) >= 0) R.pending_.emplace_back(R.slot_of(b), b);
      }
    }
  }
}

void kivi_copy_block(const PagedKvLayer& kv, int64_t src, int64_t dst) {
  KiviResidual& R = *kv.kivi;
  if (R.slot_of(dst) >= 0) R.release(R.slot_of(dst));  // stale: dst's old contents are dead
  const int32_t from = R.slot_of(src);
  if (from < 0) return;
  const bool open = kivi_k_state(kv_unit(kv, false, dst, 0)) == kKiviOpen;
  if (!open && !R.holds_rows(src)) return;  // sealed, read quantized: nothing to carry
  const int32_t to = R.claim(kv, dst, from);
  const int n_rows = R.fill_[size_t(from)];
  if (to >= 0) {
    for (int h = 0; h < kv.n_kv_heads; ++h) {
      for (int r = 0; r < n_rows; ++r) {
        std::memcpy(R.row(to, false, h, r), R.row(from, false, h, r), size_t(kv.head_dim) * 2);
        std::memcpy(R.row(to, true, h, r), R.row(from, true, h, r), size_t(kv.head_dim) * 2);
      }
    }
    R.fill_[size_t(to)] = n_rows;
    R.stamp_[size_t(to)] = R.calls_ + 1;  // not stolen before its sequence writes it next step
    return;
  }
  if (!open) return;  // a sealed block in a window without its slot is read quantized
  std::vector<float> x(static_cast<size_t>(kv.head_dim));
  for (int h = 0; h < kv.n_kv_heads; ++h) {
    uint8_t* ku = kv_unit(kv, false, dst, h);
    for (int r = 0; r < n_rows; ++r) {
      to_f32(R.row(from, false, h, r), x.data(), kv.head_dim);
      kivi_k_store_row_per_token(ku, kv.block_size, kv.head_dim, kv_kivi_bits(kv.format), r,
                                 x.data());
    }
    kivi_k_set_state(ku, kKiviPerToken);
  }
}

const uint16_t* kivi_f16_row(const PagedKvLayer& kv, const AttentionSeq& s, int kvh, int32_t j,
                             bool is_v) {
  const KiviResidual& R = *kv.kivi;
  const int64_t b = s.block_table[j / kv.block_size];
  if (kivi_k_state(kv_unit(kv, false, b, kvh)) == kKiviPerToken) return nullptr;
  if (j >= s.n_past) {
    const KiviStaging& st = R.staging();
    const int64_t t = s.first_token + (j - s.n_past);
    return (is_v ? st.v : st.k).data() + (t * kv.n_kv_heads + kvh) * kv.head_dim;
  }
  const int32_t slot = R.slot_of(b);
  return slot >= 0 ? R.row(slot, is_v, kvh, j % kv.block_size) : nullptr;
}

}  // namespace omnibus
