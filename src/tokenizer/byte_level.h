// The GPT-2 byte-to-unicode alphabet of byte-level BPE.
//
// Every byte 0..255 stands for one printable codepoint, so that vocabulary
// entries are printable strings: bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF stand
// for themselves; the other 68 bytes (controls, space, 0x7F..0xA0, 0xAD) stand,
// in increasing order, for U+0100, U+0101, ... (so ' ' is 'Ġ' U+0120 and '\n'
// is 'Ċ' U+010A).
//
// Thread-safety: pure functions over constant tables.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace omnibus::byte_level {

// The codepoint that stands for byte b.
uint32_t byte_to_cp(uint8_t b);

// The byte that codepoint cp stands for, or -1 when cp is not in the alphabet.
int cp_to_byte(uint32_t cp);

// Raw bytes spelled in the alphabet, as UTF-8 ("a b\n" -> "aĠbĊ").
std::string spell(std::string_view bytes);

}  // namespace omnibus::byte_level
