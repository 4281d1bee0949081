// The kind table (src/kinds/kind_table.cpp): one row per BuilderKind, in enum order, whose
// family agrees with the public family predicates of config.hpp.
#include <gtest/gtest.h>

#include <string>

#include "linmeta/names.hpp"
#include "src/kinds/kind_rules.hpp"

namespace linmeta {
namespace {

TEST(KindTable, EveryKindHasItsOwnRow) {
  for (const auto& [kind, name] : names::kBuilderKinds) {
    SCOPED_TRACE(std::string(name));
    const detail::KindRules& rules = detail::kind_rules(kind);
    EXPECT_EQ(rules.kind, kind);
    EXPECT_EQ(rules.family == detail::Family::Gdn, is_gdn_family(kind));
    EXPECT_EQ(rules.family == detail::Family::Linear, is_linear_attention(kind));
    EXPECT_EQ(rules.family == detail::Family::Mamba, is_mamba_base(kind));
    EXPECT_NE(rules.plan, nullptr);
    EXPECT_NE(rules.pack_gathers, nullptr);
    EXPECT_NE(rules.pack_fields, nullptr);
  }
}

}  // namespace
}  // namespace linmeta
