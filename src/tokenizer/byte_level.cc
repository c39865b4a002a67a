#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/unicode.h"

namespace omnibus::byte_level {
namespace {

bool stands_for_itself(int b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct Tables {
  std::array<uint32_t, 256> to_cp{};
  std::array<int16_t, 324> to_byte{};  // indexed by codepoint; 256 + 68 entries
};

const Tables& tables() {
  static const Tables t = [] {
    Tables x;
    x.to_byte.fill(-1);
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      x.to_cp[b] = stands_for_itself(b) ? static_cast<uint32_t>(b) : next++;
      x.to_byte[x.to_cp[b]] = static_cast<int16_t>(b);
    }
    return x;
  }();
  return t;
}

}  // namespace

uint32_t byte_to_cp(uint8_t b) { return tables().to_cp[b]; }

int cp_to_byte(uint32_t cp) {
  const auto& t = tables();
  return cp < t.to_byte.size() ? t.to_byte[cp] : -1;
}

std::string spell(std::string_view bytes) {
  std::string out;
  for (char c : bytes) unicode::append_utf8(&out, byte_to_cp(static_cast<uint8_t>(c)));
  return out;
}

}  // namespace omnibus::byte_level
