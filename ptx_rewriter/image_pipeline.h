// File: ptx_rewriter/image_pipeline.h
//
// The whole way from a module image the driver was handed to the cubin it
// loads instead: read the image (in memory or a file), find the kernels the
// bundle's globs select (from the cubins' symbol tables, so that a module
// no probe selects is left alone without decompressing its PTX), pick the
// PTX for the device, find PTX elsewhere for a cubin that has none (an
// injected finder: Triton's cache), rewrite, link the probes and the GPU
// helper library and compile for the device through the on-disk cache.
// The hook calls this at module load and only swaps the load call's image
// parameter for the result; `cuprobe` and the tests can call it offline.
//
//   ImagePipeline pipeline{&bundle, HelpersPtx(), &cache, TritonCacheFinder(roots)};
//   absl::StatusOr<std::optional<InstrumentedImage>> out =
//       InstrumentImage(ImageSource{.live = image}, /*sm=*/90, pipeline, ids);
//   if (out.ok() && out->has_value() && !(*out)->cubin.empty()) load (*out)->cubin instead
//
// Thread-safe as long as `ids` is: nothing here keeps state between calls.
#ifndef CUPROBE_PTX_REWRITER_IMAGE_PIPELINE_H_
#define CUPROBE_PTX_REWRITER_IMAGE_PIPELINE_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "probe/bundle.h"
#include "ptx_rewriter/compile_cache.h"

namespace cuprobe {

struct Image;  // ptx_rewriter/image.h

// What the driver was asked to load.
struct ImageSource {
  const void* live = nullptr;  // in-memory image (wrapper, fatbin, cubin or PTX)
  std::string path;            // or a file (cuLibraryLoadFromFile, cuModuleLoad)
  std::string Describe() const;
};

struct InstrumentedImage {
  std::vector<uint8_t> cubin;  // loaded instead of the original image
  // Instrumented kernels (mangled name) and the id each was given.
  std::vector<std::pair<std::string, uint32_t>> kernels;
  // Kernels a probe selected that could not be instrumented (no PTX: SASS
  // only), for the one message per module.
  std::vector<std::string> not_instrumented;
  uint32_t map_table_entries = 0;  // __cuprobe_map_table length; 0: none
  // The module has the descriptors' constant copy (__cuprobe_map_descs,
  // map_table_entries x 128 bytes) to fill with the table.
  bool map_descs = false;
  // The module's site counters (CUPROBE_SITE_COUNTS_SYMBOL to fill); empty: none.
  std::vector<SiteCounter> site_counters;
};

// PTX for a cubin that carries none, or nullopt.
using PtxSourceFinder =
    std::function<std::optional<std::string>(absl::Span<const uint8_t> cubin)>;

// Triton compiles PTX to a cubin itself and hands the driver the cubin, so
// the module has no PTX; its cache keeps both (<root>/<hash>/<kernel>.cubin
// next to <kernel>.ptx). The finder looks, two levels down each root, for
// the cubin with exactly these bytes and returns its PTX. The caller names
// the roots ($TRITON_CACHE_DIR, ~/.triton/cache).
[[nodiscard]] PtxSourceFinder TritonCacheFinder(std::vector<std::string> roots);

// Ids of the instrumented kernels (`ctx->kernel_id`), kept by the caller so
// that a kernel keeps its id across reloads.
class KernelIds {
 public:
  virtual ~KernelIds() = default;
  // The id of `mangled`, assigning the next one the first time.
  virtual uint32_t IdOf(const std::string& mangled) = 0;
  // Where ids for kernels the name scan missed start (never handed out by
  // IdOf).
  virtual uint32_t FirstUnnamedId() = 0;
};

struct ImagePipeline {
  const ProbeBundle* bundle = nullptr;
  std::string_view helper_ptx;  // the GPU helper library
  const CompileCache* cache = nullptr;
  PtxSourceFinder find_ptx;     // optional
};

// nullopt: no probe selects a kernel of this image (load it untouched). An
// image whose selected kernels have no PTX anywhere comes back with an
// empty cubin and those kernels in not_instrumented. An error: the image
// cannot be read, or its selected kernels could not be instrumented.
[[nodiscard]] absl::StatusOr<std::optional<InstrumentedImage>> InstrumentImage(
    const ImageSource& source, uint32_t sm, const ImagePipeline& pipeline, KernelIds& ids);

// The kernel names of PTX text: the identifier after each `.entry` (a cheap
// scan; the rewriter makes the real decision).
[[nodiscard]] std::vector<std::string> PtxEntryNames(std::string_view ptx);

// The backend `cuprobe run --backend auto` gives a kernel: the PTX one when
// the image's PTX for the device (or the PTX `find_ptx` finds for a bare
// cubin) has the kernel; the patch one (its SASS, through the Compute
// Sanitizer) otherwise.
enum class KernelBackend : uint8_t { kPtx = 1, kPatch = 2 };

// The CatalogKernelRecord::backend code of a backend (probe/trace_records.h
// numbers them the same).
[[nodiscard]] constexpr uint16_t CatalogBackendCode(KernelBackend backend) {
  return static_cast<uint16_t>(backend);
}

struct CatalogKernel {
  std::string name;  // mangled
  KernelBackend backend = KernelBackend::kPatch;
};

// Every kernel of an image, once each (`cuprobe list`, and the hook's
// answer to it): the kernels of its cubins' symbol tables (those for `sm`
// when it has any, else all) and of its PTX for `sm`, in that order. An error only when the image cannot be read; an
// unreadable cubin or PTX entry leaves its kernels out.
[[nodiscard]] absl::StatusOr<std::vector<CatalogKernel>> CatalogImage(
    const ImageSource& source, uint32_t sm, const PtxSourceFinder& find_ptx);
// The same for an image already read (a file's bytes: `cuprobe list FILE`).
[[nodiscard]] std::vector<CatalogKernel> CatalogImage(const Image& image, uint32_t sm,
                                                      const PtxSourceFinder& find_ptx);

}  // namespace cuprobe

#endif  // CUPROBE_PTX_REWRITER_IMAGE_PIPELINE_H_
