#include <gtest/gtest.h>

#include "config/parse.h"

namespace wren {
TEST(Config, PresetsParse) {
  for (auto& name : preset_names()) EXPECT_NO_THROW(load_preset(name)) << name;
}
}  // namespace wren
