// File: ptx_rewriter/builtin_probes.cc
#include "ptx_rewriter/builtin_probes.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace cuprobe {
namespace {

// The probe follows the ABI of include/cuprobe/abi.h exactly: five
// parameters, a b32 return value (ignored). .target sm_70 because
// activemask needs it and a lower target never beats the module's.
//
// Warp aggregation: the lowest active lane adds popc(activemask) for the
// whole converged group. Lanes of a warp that reach the probe apart (after
// divergence) form separate groups, each with its own leader, so every lane
// is counted exactly once.
constexpr char kCountPtx[] = R"(.version 7.0
.target sm_70
.address_size 64

.extern .global .align 8 .u64 __cuprobe_map_table[];
.extern .func (.param .b64 func_retval0) __cuprobe_map_add(
	.param .b64 map,
	.param .b64 key,
	.param .b64 delta
);

.visible .func (.param .b32 func_retval0) __cuprobe_builtin_count(
	.param .b64 mem_addr,
	.param .b32 mem_info,
	.param .b32 kernel_id,
	.param .b32 site_index,
	.param .b64 args
)
{
	.local .align 4 .b8 __count_key[4];
	.reg .pred %p<2>;
	.reg .b32 %r<7>;
	.reg .b64 %rd<6>;
	ld.param.u32 %r1, [kernel_id];
	activemask.b32 %r2;
	mov.u32 %r3, %laneid;
	brev.b32 %r4, %r2;
	bfind.shiftamt.u32 %r5, %r4;
	setp.ne.u32 %p1, %r3, %r5;
	@%p1 bra $L__count_done;
	popc.b32 %r6, %r2;
	cvt.u64.u32 %rd3, %r6;
	// The key goes by address, as for every map helper (BPF's convention).
	st.local.u32 [__count_key], %r1;
	mov.u64 %rd4, __count_key;
	cvta.local.u64 %rd2, %rd4;
	ld.global.u64 %rd1, [__cuprobe_map_table];
	{
	.param .b64 a0;
	.param .b64 a1;
	.param .b64 a2;
	.param .b64 r0;
	st.param.b64 [a0], %rd1;
	st.param.b64 [a1], %rd2;
	st.param.b64 [a2], %rd3;
	call (r0), __cuprobe_map_add, (a0, a1, a2);
	}
$L__count_done:
	st.param.b32 [func_retval0], 0;
	ret;
}
)";

}  // namespace

bool IsBuiltinProbeSpec(std::string_view spec) { return absl::StartsWith(spec, "builtin:"); }

std::string_view BuiltinCountPtx() { return kCountPtx; }

absl::StatusOr<ProbeBundle> BuiltinBundle(std::string_view spec,
                                          const BuiltinBundleOptions& options) {
  if (spec != "builtin:count") {
    return absl::NotFoundError(
        absl::StrCat("unknown built-in probe '", spec, "'; built-in probes: builtin:count"));
  }
  if (!options.entry && !options.exit && !options.memory) {
    return absl::InvalidArgumentError(
        "builtin:count needs an attach point: --entry, --exit and/or --mem");
  }
  ProbeBundle b;
  b.compiler_version = "cuprobe builtin";
  b.source_name = "builtin:count";
  b.ptx = kCountPtx;
  b.helpers = {CUPROBE_HELPER_SYMBOL_MAP_ADD};
  MapSpec map;
  map.name = kBuiltinCountMapName;
  map.type = CUPROBE_MAP_ARRAY;
  map.key_size = 4;
  map.value_size = 8;
  map.max_entries = kBuiltinCountMaxKernels;
  map.key_type = {"u32", 4, {}};
  map.value_type = {"u64", 8, {}};
  b.maps.push_back(map);
  auto add = [&](AttachKind kind, std::string_view section) {
    ProbeProgram p;
    p.name = absl::StrCat("count_", section);
    p.section = absl::StrCat("cuprobe/", section, "/", options.kernel_glob);
    p.attach = kind;
    p.kernel_glob = options.kernel_glob;
    p.ptx_function = kBuiltinCountFunction;
    p.reads_args = false;
    p.mem_spaces = options.mem_spaces;
    b.programs.push_back(std::move(p));
  };
  if (options.entry) add(AttachKind::kEntry, "entry");
  if (options.exit) add(AttachKind::kExit, "exit");
  if (options.memory) add(AttachKind::kMemory, "mem");
  return b;
}

}  // namespace cuprobe
