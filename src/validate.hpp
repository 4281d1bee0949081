// Step and configuration validation: every rule that rejects input lives here.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "linmeta/config.hpp"
#include "linmeta/step.hpp"

namespace linmeta::detail {

/// Throws linmeta::Error("linmeta: " + message): every rejection of input (the kinds' own
/// rules in src/kinds/ included).
[[noreturn]] void reject(const std::string& message);

/// The longest query of a step (its query_start_loc_cpu is valid).
[[nodiscard]] int32_t longest_query(const Step& step);

/// Checks shapes, pointers and values of a step before any planning (SPEC §1).
void validate_step(const Config& config, BuilderKind kind, const Step& step, bool capture,
                   std::span<const BlockTable> tables);

/// Block-table pointers and strides; tables[i] is group first_group + i (errors name it).
void validate_tables(std::span<const BlockTable> tables, int32_t first_group = 0);

/// Spec rows may carry at most num_spec + 1 tokens (SPEC §8 under RecoverSSM).
void check_spec_row_length(const Config& config, BuilderKind kind, int32_t row, int32_t query_len);

/// A required host array for the path the step takes.
void require_is_prefilling(const Step& step, const char* why);

/// Whether a spec-decode build reads step.num_accepted_tokens: not a capture build
/// (accepted = query lengths, SPEC §7 F) nor KDA RecoverSSM (all ones, SPEC §8; the
/// pointer may be null there). pack.cpp's AcceptedFrom choice is the same rule.
[[nodiscard]] bool reads_accepted(const Config& config, BuilderKind kind, bool capture);
/// The accepted counts of a spec-decode step, where reads_accepted().
void require_accepted(const Config& config, BuilderKind kind, const Step& step, bool capture);

/// The widest block-table read of a step: `cols` columns at row `row`. 64-bit: a
/// column derived from a host upper bound near INT32_MAX must not wrap below a
/// table's width.
struct WidthNeed {
  int64_t cols = 1;
  int32_t row = 0;
  const char* what = "the state gather";
  void need(int64_t c, int32_t r, const char* w) {
    if (c > cols) {
      cols = c;
      row = r;
      what = w;
    }
  }
};

/// Every table must be at least as wide as the step reads; tables[i] is group
/// first_group + i (errors name it).
void check_table_widths(std::span<const BlockTable> tables, const WidthNeed& need,
                        int32_t first_group = 0);

}  // namespace linmeta::detail
