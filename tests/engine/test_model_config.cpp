// Unit tests of ModelConfig parsing without a file: every missing key is reported at once.
#include <gtest/gtest.h>

#include "engine/model_config.h"

namespace ds4 {
namespace {

TEST(ModelConfig, MissingKeysAreAllListedInOneError) {
  gguf::Metadata m;
  m.set("general.architecture", gguf::Value::make_string("deepseek4"));
  m.set("deepseek4.block_count", gguf::Value::make_u32(2));
  auto r = model_config_from_gguf(m, {}, "x.gguf");
  ASSERT_FALSE(r.ok());
  const std::string& e = r.error().message;
  for (const char* key : {"deepseek4.expert_count", "deepseek4.attention.sliding_window",
                          "deepseek4.attention.compress_ratios", "deepseek4.hyper_connection.count",
                          "deepseek4.rope.scaling.factor", "deepseek4.swiglu_clamp_exp"})
    EXPECT_NE(e.find(key), std::string::npos) << key << "\n" << e;
  EXPECT_EQ(e.rfind("x.gguf", 0), 0u);
}

TEST(ModelConfig, WrongArchitectureIsNamed) {
  gguf::Metadata m;
  m.set("general.architecture", gguf::Value::make_string("llama"));
  auto r = model_config_from_gguf(m, {}, "y.gguf");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("expected 'deepseek4', found 'llama'"), std::string::npos);
}

}  // namespace
}  // namespace ds4
