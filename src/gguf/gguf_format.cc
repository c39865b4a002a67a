#include "gguf/gguf_format.h"

namespace omnibus {

const char* gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::kUint8:
      return "u8";
    case GgufType::kInt8:
      return "i8";
    case GgufType::kUint16:
      return "u16";
    case GgufType::kInt16:
      return "i16";
    case GgufType::kUint32:
      return "u32";
    case GgufType::kInt32:
      return "i32";
    case GgufType::kFloat32:
      return "f32";
    case GgufType::kBool:
      return "bool";
    case GgufType::kString:
      return "string";
    case GgufType::kArray:
      return "array";
    case GgufType::kUint64:
      return "u64";
    case GgufType::kInt64:
      return "i64";
    case GgufType::kFloat64:
      return "f64";
  }
  return "?";
}

size_t gguf_type_size(GgufType t) {
  switch (t) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kBool:
      return 1;
    case GgufType::kUint16:
    case GgufType::kInt16:
      return 2;
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kFloat32:
      return 4;
    case GgufType::kUint64:
    case GgufType::kInt64:
    case GgufType::kFloat64:
      return 8;
    case GgufType::kString:
    case GgufType::kArray:
      return 0;
  }
  return 0;
}

bool gguf_type_is_integer(GgufType t) {
  switch (t) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kUint16:
    case GgufType::kInt16:
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kUint64:
    case GgufType::kInt64:
      return true;
    default:
      return false;
  }
}

namespace {

// One row per ggml type id (ggml.h's enum ggml_type). Geometry is filled in
// only for the types omnibus supports; block sizes and byte counts follow the
// block structs of ggml-common.h (e.g. Q4_1 = fp16 d, fp16 m, 16 bytes of nibbles).
struct GeometryRow {
  int64_t block_size;
  uint64_t type_size;
  const char* name;
};

constexpr GeometryRow kRows[] = {
    /* 0 */ {1, 4, "f32"},
    /* 1 */ {1, 2, "f16"},
    /* 2 */ {32, 18, "q4_0"},
    /* 3 */ {32, 20, "q4_1"},
    /* 4 */ {0, 0, nullptr},  // q4_2, removed from ggml
    /* 5 */ {0, 0, nullptr},  // q4_3, removed from ggml
    /* 6 */ {32, 22, "q5_0"},
    /* 7 */ {32, 24, "q5_1"},
    /* 8 */ {32, 34, "q8_0"},
    /* 9 */ {32, 36, "q8_1"},
    /* 10 */ {256, 84, "q2_K"},
    /* 11 */ {256, 110, "q3_K"},
    /* 12 */ {256, 144, "q4_K"},
    /* 13 */ {256, 176, "q5_K"},
    /* 14 */ {256, 210, "q6_K"},
    /* 15 */ {256, 292, "q8_K"},
    /* 16 */ {0, 0, "iq2_xxs"},
    /* 17 */ {0, 0, "iq2_xs"},
    /* 18 */ {0, 0, "iq3_xxs"},
    /* 19 */ {0, 0, "iq1_s"},
    /* 20 */ {0, 0, "iq4_nl"},
    /* 21 */ {0, 0, "iq3_s"},
    /* 22 */ {0, 0, "iq2_s"},
    /* 23 */ {0, 0, "iq4_xs"},
    /* 24 */ {0, 0, "i8"},
    /* 25 */ {0, 0, "i16"},
    /* 26 */ {0, 0, "i32"},
    /* 27 */ {0, 0, "i64"},
    /* 28 */ {0, 0, "f64"},
    /* 29 */ {0, 0, "iq1_m"},
    /* 30 */ {1, 2, "bf16"},
    /* 31 */ {0, 0, nullptr},  // q4_0_4_4, removed from GGUF
    /* 32 */ {0, 0, nullptr},  // q4_0_4_8
    /* 33 */ {0, 0, nullptr},  // q4_0_8_8
    /* 34 */ {0, 0, "tq1_0"},
    /* 35 */ {0, 0, "tq2_0"},
    /* 36 */ {0, 0, nullptr},  // iq4_nl_4_4, removed
    /* 37 */ {0, 0, nullptr},  // iq4_nl_4_8
    /* 38 */ {0, 0, nullptr},  // iq4_nl_8_8
    /* 39 */ {0, 0, "mxfp4"},
    /* 40 */ {0, 0, "nvfp4"},
    /* 41 */ {0, 0, "q1_0"},
    /* 42 */ {0, 0, "q2_0"},
};

}  // namespace

GgufBlockGeometry gguf_block_geometry(uint32_t type_id) {
  if (type_id >= sizeof(kRows) / sizeof(kRows[0])) return {};
  const GeometryRow& r = kRows[type_id];
  return {r.block_size, r.type_size, r.name};
}

}  // namespace omnibus
