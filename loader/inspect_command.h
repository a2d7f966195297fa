// File: loader/inspect_command.h
//
// `cuprobe inspect FILE`: lists the CUDA code in a host executable or shared
// library, a fatbin, an ELF cubin or PTX text, offline (no GPU needed), and
// for each kernel the backend `cuprobe run` gives it ("backend: ptx" where
// PTX for --sm has it, "backend: patch (SASS only)" where only --backend
// patch reaches it).
//
//   CUPROBE_RETURN_IF_ERROR(RunInspect(args.inspect));   // prints to stdout
#ifndef CUPROBE_LOADER_INSPECT_COMMAND_H_
#define CUPROBE_LOADER_INSPECT_COMMAND_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "loader/args.h"
#include "ptx_rewriter/image.h"

namespace cuprobe {

// A CUDA image inside a file, and where it is ("app fatbin @0x3c8").
struct FileImage {
  absl::Span<const uint8_t> bytes;
  std::string where;
};

// The images of a file's bytes: a host executable's or library's fatbins
// (its .nv_fatbin section's, then containers elsewhere in it); else the
// bytes themselves (a fatbin, cubin or PTX file). Empty: a host ELF without
// CUDA code.
[[nodiscard]] absl::StatusOr<std::vector<FileImage>> FindImagesInFile(
    absl::Span<const uint8_t> all, const std::string& path);

// The image a FileImage holds; an error names where it is.
[[nodiscard]] absl::StatusOr<Image> ReadFileImage(const FileImage& f);

// A file's bytes; NOT_FOUND naming the file and why.
[[nodiscard]] absl::StatusOr<std::vector<uint8_t>> ReadFileBytes(const std::string& path);

// The listing `cuprobe inspect` prints.
[[nodiscard]] absl::StatusOr<std::string> InspectFile(const InspectOptions& options);

// Prints the listing to stdout; with --extract-ptx also writes the PTX.
// Without ptx_search_roots, looks where the hook looks
// (PtxSearchRootsFromEnvironment).
[[nodiscard]] absl::Status RunInspect(const InspectOptions& options);

// Where the hook looks for the PTX of a bare cubin (Triton's cache):
// $TRITON_CACHE_DIR, then $HOME/.triton/cache (cupti_hook/hook_config.cc).
[[nodiscard]] std::vector<std::string> PtxSearchRootsFromEnvironment();

}  // namespace cuprobe

#endif  // CUPROBE_LOADER_INSPECT_COMMAND_H_
