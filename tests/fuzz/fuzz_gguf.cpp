// libFuzzer target: the GGUF reader (io/gguf) on any bytes. Any input is either a validated
// file or an IoError naming the origin; every tensor it hands out lies inside the input, and
// decoding its first row (io/gguf_blocks) reads only its own bytes.
// links: wren_io
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "io/gguf.h"
#include "io/gguf_blocks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const wren::GgufFile f = wren::GgufFile::parse(data, size, "fuzz.gguf");
    for (const wren::GgufTensor& t : f.tensors()) {
      if (t.data < data || t.data + t.nbytes > data + size) std::abort();  // outside the input
      if (t.row_bytes() > t.nbytes || t.row_values() > (int64_t(1) << 20)) continue;
      std::vector<float> row(static_cast<size_t>(t.row_values()));
      wren::gguf_blocks::dequantize_row(t.type, t.data, t.row_values(), row.data());
    }
  } catch (const wren::IoError&) {
  }
  return 0;
}
