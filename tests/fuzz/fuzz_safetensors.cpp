// libFuzzer target: the safetensors header reader (io/safetensors) on any bytes. Any input is
// either a validated header or an IoError naming the origin; every tensor it hands out lies
// inside the file.
// links: wren_config
// sources: src/io/safetensors.cpp src/io/mapped_file.cpp src/io/output_file.cpp
#include <cstdint>
#include <cstdlib>

#include "io/safetensors.h"
#include "io/mapped_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const wren::SafetensorsHeader h = wren::parse_safetensors_header(data, size, size, "fuzz.safetensors");
    for (const wren::TensorView& t : h.tensors)
      if (t.file_offset < h.data_start || t.file_offset + t.nbytes > size) std::abort();  // outside the file
  } catch (const wren::IoError&) {
  }
  return 0;
}
