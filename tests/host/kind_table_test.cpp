// The kind table (src/kinds/kind_table.cpp): one row per BuilderKind, in enum order, each
// kind in one family.
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
    EXPECT_EQ(in_family(kind, BuilderFamily::Gdn) + in_family(kind, BuilderFamily::Mamba) +
                  in_family(kind, BuilderFamily::Linear) +
                  in_family(kind, BuilderFamily::Attention) +
                  in_family(kind, BuilderFamily::Sglang),
              1);
    EXPECT_NE(rules.plan, nullptr);
    EXPECT_NE(rules.pack_gathers, nullptr);
    EXPECT_NE(rules.pack_fields, nullptr);
  }
}

}  // namespace
}  // namespace linmeta
