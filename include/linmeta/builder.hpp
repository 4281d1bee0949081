// Metadata builders: one implementation (MetadataBuilder) and a class per vLLM builder, one
// per kind of LINMETA_BUILDER_KINDS (config.hpp): GdnMetadataBuilder, KdaMetadataBuilder, …,
// <Enumerator>MetadataBuilder.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "linmeta/config.hpp"
#include "linmeta/metadata.hpp"
#include "linmeta/step.hpp"

struct CUstream_st;

namespace linmeta {

/// Same type as cudaStream_t; nullptr is the legacy default stream.
using Stream = CUstream_st*;

/// Upper bound of BuilderOptions::num_groups.
inline constexpr int32_t kMaxNumGroups = 64;

struct BuilderOptions {
  Target target = Target::Host;
  /// KV-cache groups this builder serves (each owns its persistent buffers), in
  /// [1, kMaxNumGroups].
  int32_t num_groups = 1;
  /// Pinned staging slots cycled by eager builds (cuda target).
  int32_t staging_slots = 4;
  /// Slots reserved for builds captured into CUDA graphs (cuda target): a captured
  /// build keeps its slot for the builder's lifetime, since replays re-read it.
  int32_t capture_slots = 8;
  /// Programmatic Dependent Launch (cuda target, sm_90+): the finish kernel may be
  /// scheduled while the preceding kernel of the stream still runs, and waits for it
  /// (griddepcontrol.wait) before reading device inputs or writing any buffer. Hides
  /// launch latency behind the producer of seq_lens / accepted counts. Where the running
  /// kernel cannot wait (a GPU before sm_90, or compute_80 PTX JIT-compiled on a newer one)
  /// the finish kernel is launched in plain stream order instead: the same results.
  bool programmatic_dependent_launch = false;
};

/// Host-side time of the last build, split by phase (nanoseconds).
struct BuildTiming {
  int64_t plan_ns = 0;      ///< validation + classification
  int64_t pack_ns = 0;      ///< writing the staging arena
  int64_t enqueue_ns = 0;   ///< copy + launch (cuda) or element work (host)
  int64_t metadata_ns = 0;  ///< making the returned Metadata (every group's views)
};

class MetadataBuilder {
 public:
  MetadataBuilder(BuilderKind kind, const Config& config, const BuilderOptions& options = {});
  ~MetadataBuilder();
  /// A moved-from builder holds nothing: every call on it throws linmeta::Error.
  MetadataBuilder(MetadataBuilder&&) noexcept;
  MetadataBuilder& operator=(MetadataBuilder&&) noexcept;
  MetadataBuilder(const MetadataBuilder&) = delete;
  MetadataBuilder& operator=(const MetadataBuilder&) = delete;

  /// Builds group 0's metadata from step.block_table (num_groups must be 1).
  const Metadata& build(const Step& step, Stream stream = nullptr);
  /// SPEC §7 F: accepted = query lengths, drafts = query lengths - 1, then build.
  const Metadata& build_for_cudagraph_capture(const Step& step, Stream stream = nullptr);

  /// Plans the step once and builds every group from its own block table
  /// (tables.size() == num_groups; step.block_table is ignored). Returns one
  /// Metadata per group, valid until the next build.
  std::span<const Metadata> build_groups(const Step& step, std::span<const BlockTable> tables,
                                         Stream stream = nullptr);
  std::span<const Metadata> build_groups_for_cudagraph_capture(const Step& step,
                                                               std::span<const BlockTable> tables,
                                                               Stream stream = nullptr);

  /// SPEC §7 E: re-gathers the state indices of the last built step from `table`
  /// into group `group`'s buffers; every batch-level field is kept from `metadata`.
  Metadata update_block_table(const Metadata& metadata, const BlockTable& table, int32_t group = 0,
                              Stream stream = nullptr);

  [[nodiscard]] const Config& config() const;
  [[nodiscard]] BuilderKind kind() const;
  [[nodiscard]] Target target() const;
  [[nodiscard]] int32_t num_groups() const;
  [[nodiscard]] const BuildTiming& last_timing() const;
  /// Bytes of the step arena packed by the last build (or update_block_table).
  [[nodiscard]] int64_t last_upload_bytes() const;
  /// Kernel parameter bytes of the last launch (cuda target): the launch header plus the
  /// arena tier when the arena travels in the parameters; the header alone when the arena
  /// was copied first (then below last_upload_bytes()); 0 on the host target or when
  /// nothing was launched.
  [[nodiscard]] int32_t last_launch_param_bytes() const;
  /// Memory the builder holds: pinned host staging and device (or host) buffers.
  [[nodiscard]] int64_t pinned_bytes() const;
  [[nodiscard]] int64_t buffer_bytes() const;

  /// The implementation (an incomplete type here; src/builder_impl.hpp defines it for
  /// linmeta's own tests). Throws linmeta::Error on a moved-from builder.
  class Impl;
  [[nodiscard]] Impl& impl() const;

 private:
  std::unique_ptr<Impl> impl_;
};

/// A MetadataBuilder of one kind: `KindMetadataBuilder<BuilderKind::Gdn> b(config)`.
template <BuilderKind Kind>
class KindMetadataBuilder : public MetadataBuilder {
 public:
  explicit KindMetadataBuilder(const Config& config, const BuilderOptions& options = {})
      : MetadataBuilder(Kind, config, options) {}
};

/// One alias a kind of LINMETA_BUILDER_KINDS (config.hpp), vLLM's class of that name:
/// GdnMetadataBuilder, KdaMetadataBuilder, Mamba2MetadataBuilder, Mamba1MetadataBuilder,
/// ShortConvMetadataBuilder, LinearMetadataBuilder, BailingLinearMetadataBuilder,
/// PleShortConvMetadataBuilder (all but GDN and KDA take Profile::Vllm034 only).
#define LINMETA_KIND_ALIAS(K, name, family) \
  using K##MetadataBuilder = KindMetadataBuilder<BuilderKind::K>;
LINMETA_BUILDER_KINDS(LINMETA_KIND_ALIAS)
#undef LINMETA_KIND_ALIAS

}  // namespace linmeta
