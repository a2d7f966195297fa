// The verifier's must-reject and must-pass suites. C cases are compiled by
// the real clang-19 at test time; raw cases build instruction sequences for
// faults that C cannot express. Every rejection is checked for its message
// (and, for C cases, for the source line); every accepted C probe is also
// lowered to PTX and assembled by ptxas.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loader/compiler/compiler.h"
#include "loader/compiler/verifier.h"
#include "tests/compiler/test_util.h"

namespace cuprobe {
namespace {

using ::testing::HasSubstr;
using namespace cuprobe::testing;  // NOLINT

constexpr char kPrelude[] = R"(
#include "cuprobe/probe.h"
struct val { u64 a; u32 b; u32 c; u64 arr[4]; };
struct event { u64 ts; u32 sm; u32 block; };
struct { __uint(type, BPF_MAP_TYPE_HASH); __type(key, u32); __type(value, u64);
         __uint(max_entries, 64); } h SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_ARRAY); __type(key, u32); __type(value, struct val);
         __uint(max_entries, 4); } arr SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_RINGBUF); __uint(max_entries, 4096); } rb SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_HIST_LOG2); __type(key, u32); __type(value, u64);
         __uint(max_entries, 64); } hist SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_PERTHREAD); __type(key, u32); __type(value, u64);
         __uint(max_entries, 1); } per SEC(".maps");
)";

struct Case {
  const char* name;
  const char* body;
  const char* expected;  // substring of the rejection ("" for must-pass)
};

// ---- Must reject: C ----------------------------------------------------------

const Case kRejectC[] = {
    {"null_deref", R"(SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
       u32 k = ctx->kernel_id; u64 *v = bpf_map_lookup_elem(&h, &k);
       return *v; })",
     "may be NULL"},
    {"uninit_key", R"(SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
       u32 k; u64 *v = bpf_map_lookup_elem(&h, &k); return v != 0; })",
     "the key reads uninitialised stack"},
    {"ctx_write", R"(SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
       ctx->kernel_id = 1; return 0; })",
     "write to the context"},
    {"ctx_partial_read", R"(SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
       return *(volatile u16 *)&ctx->kernel_id; })",
     "partial or misaligned read of context field kernel_id"},
    {"ctx_u32_read_of_u64", R"(SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
       return *(volatile u32 *)&ctx->global_timer; })",
     "partial or misaligned read of context field global_timer"},
    {"ctx_variable_offset", R"(SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
       return ctx->args[ctx->kernel_id & 7]; })",
     "variable offset added to the context pointer"},
    {"ctx_out_of_range", R"(SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
       return ((volatile u64 *)ctx)[40]; })",
     "outside struct cuprobe_ctx"},
    {"map_value_unbounded_index", R"(SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
       u32 k = 0; struct val *v = bpf_map_lookup_elem(&arr, &k); if (!v) return 0;
       return v->arr[ctx->args[0]]; })",
     "is unbounded"},
    {"map_value_index_off_by_one", R"(SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
       u32 k = 0; struct val *v = bpf_map_lookup_elem(&arr, &k); if (!v) return 0;
       u64 i = ctx->args[0]; if (i > 4) return 0; return v->arr[i]; })",
     "out of bounds of the map value of arr"},
    {"map_value_const_oob", R"(SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
       u32 k = 0; struct val *v = bpf_map_lookup_elem(&arr, &k); if (!v) return 0;
       return ((volatile u64 *)v)[6]; })",
     "out of bounds of the map value of arr (48 bytes)"},
    {"map_value_negative", R"(SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
       u32 k = 0; u64 *v = bpf_map_lookup_elem(&h, &k); if (!v) return 0;
       return ((volatile u64 *)v)[-1]; })",
     "out of bounds"},
    {"misaligned_map_value", R"(SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
       u32 k = 0; struct val *v = bpf_map_lookup_elem(&arr, &k); if (!v) return 0;
       return *(volatile u32 *)((char *)v + 2); })",
     "misaligned map value access"},
    {"unknown_helper", R"(static long (*probe_read)(void *, u32, const void *) = (void *)4;
       SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
       u64 x = 0; probe_read(&x, 8, (void *)0); return x; })",
     "helper 4 (bpf_probe_read) exists only in the Linux kernel"},
    {"unknown_helper_id", R"(static long (*nothing)(void) = (void *)900;
       SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) { return nothing(); })",
     "unknown helper 900"},
    {"key_is_scalar", R"(SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
       return bpf_map_lookup_elem(&h, (void *)(long)ctx->kernel_id) != 0; })",
     "the key (R2) is a scalar"},
    {"map_arg_is_scalar", R"(SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
       u32 k = 0; return bpf_map_lookup_elem((void *)(long)ctx->kernel_id, &k) != 0; })",
     "argument 1 of map_lookup_elem (R1) is a scalar; expected a map"},
    {"hist_add_on_hash", R"(SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
       cuprobe_hist_add(&h, ctx->clock, 1); return 0; })",
     "hist_add on map 'h' of type HASH"},
    {"ringbuf_output_on_hash", R"(SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
       u64 x = 1; bpf_ringbuf_output(&h, &x, 8, 0); return 0; })",
     "expected a RINGBUF map"},
    {"lookup_on_ringbuf", R"(SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
       u32 k = 0; return bpf_map_lookup_elem(&rb, &k) != 0; })",
     "expected a map with keys"},
    {"map_add_needs_u64_values", R"(SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
       u32 k = 0; cuprobe_map_add(&arr, &k, 1); return 0; })",
     "expected a map with u64 values"},
    {"reservation_leak", R"(SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
       struct event *e = bpf_ringbuf_reserve(&rb, sizeof(*e), 0); if (!e) return 0;
       e->ts = ctx->global_timer; return 0; })",
     "neither submitted nor discarded"},
    {"submit_unchecked", R"(SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
       struct event *e = bpf_ringbuf_reserve(&rb, sizeof(*e), 0);
       bpf_ringbuf_submit(e, 0); return 0; })",
     "expected a record checked against NULL"},
    {"reserve_variable_size", R"(SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
       void *e = bpf_ringbuf_reserve(&rb, ctx->args[0], 0); if (e) bpf_ringbuf_discard(e, 0);
       return 0; })",
     "must be a constant size"},
    {"reserve_too_large", R"(SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
       void *e = bpf_ringbuf_reserve(&rb, 1 << 21, 0); if (e) bpf_ringbuf_discard(e, 0);
       return 0; })",
     "ring-buffer reservation of 2097152 bytes"},
    {"record_oob", R"(SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
       u64 *e = bpf_ringbuf_reserve(&rb, 16, 0); if (!e) return 0;
       e[2] = 1; bpf_ringbuf_submit(e, 0); return 0; })",
     "out of bounds of the ring-buffer record"},
    {"use_after_submit", R"(SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
       struct event *e = bpf_ringbuf_reserve(&rb, sizeof(*e), 0); if (!e) return 0;
       bpf_ringbuf_submit(e, 0); e->ts = ctx->clock; return 0; })",
     "not a pointer"},
    {"write_rodata", R"(const volatile u64 limit = 5;
       SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
       *(volatile u64 *)&limit = ctx->clock; return 0; })",
     "write into read-only .rodata"},
    {"infinite_loop", R"(SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
       volatile u32 stop = 0; while (!stop) { } return 0; })",
     "infinite loop"},
    {"unbounded_loop", R"(SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
       u64 sum = 0; for (u64 i = 0; i < ctx->args[0]; i++) sum += ctx->args[1] ^ i;
       u32 k = 0; cuprobe_map_add(&h, &k, sum); return 0; })",
     "loop without a provable bound"},
    {"printk_too_many_conversions", R"(SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
       bpf_printk("%d %d %d %d", ctx->sm_id, ctx->warp_id, ctx->lane_id); return 0; })",
     "more than 3 conversions"},
    {"printk_string_conversion", R"(SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
       bpf_printk("%s", ctx->sm_id); return 0; })",
     "an invalid conversion"},
    {"printk_pointer_argument", R"(SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
       u64 x = ctx->clock; bpf_printk("%lx", &x); return 0; })",
     "printk argument 1 (R3) is a stack pointer"},
    {"pointer_leak_into_map", R"(SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
       u32 k = 0; struct val *v = bpf_map_lookup_elem(&arr, &k); if (!v) return 0;
       v->a = (u64)&k; return 0; })",
     "would leak an address"},
    {"pointer_multiplication", R"(SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
       u32 k = 0; u64 *v = bpf_map_lookup_elem(&h, &k); if (!v) return 0;
       u64 x = (u64)v; x *= ctx->sm_id; return *(u64 *)x; })",
     "is not allowed"},
    {"pointer_comparison", R"(SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
       u32 k = 0; u64 *v = bpf_map_lookup_elem(&h, &k); if (!v) return 0;
       return (void *)v > (void *)&k; })",
     "other than == NULL"},
    {"update_value_uninit", R"(SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
       u32 k = 0; u64 v; bpf_map_update_elem(&h, &k, &v, 0); return 0; })",
     "the value reads uninitialised stack"},
    {"get_arg_without_ctx", R"(SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
       return cuprobe_get_arg((void *)0, ctx->sm_id); })",
     "expected the context (ctx)"},
    {"not_an_attach_point", R"(SEC("gpu/sched/foo") int p(struct cuprobe_ctx *ctx) {
       return 0; })",
     "is not an attach point"},
    {"empty_glob", R"(SEC("cuprobe/exit/") int p(struct cuprobe_ctx *ctx) { return 0; })",
     "no kernel after 'cuprobe/exit/'"},
};

// ---- Must reject: raw instructions --------------------------------------------

struct RawCase {
  const char* name;
  std::vector<Insn> insns;
  const char* expected;
  std::vector<ObjectMap> maps = {};
};

std::vector<Insn> Concat(std::initializer_list<std::vector<Insn>> parts) {
  std::vector<Insn> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

std::vector<RawCase> RawRejects() {
  Insn bad_alu = Alu64Imm(0xe0, 0, 0);
  Insn bad_div = Alu64Imm(kAluDiv, 0, 3);
  bad_div.off = 2;
  Insn bswap8 = Alu64Imm(kAluEnd, 0, 8);
  Insn pseudo_call = Call(3);
  pseudo_call.src = kPseudoCall;
  Insn ld_half = LdImm64(0, 1)[0];
  return {
      {"r0_unset_at_exit", {Exit()}, "R0 (the return value) is not set"},
      {"uninit_register", {MovReg(0, 2), Exit()}, "R2 is read before it is initialised"},
      {"write_r10", {MovImm(10, 0), MovImm(0, 0), Exit()}, "frame pointer) is read-only"},
      {"jump_out_of_range", {MovImm(0, 0), Ja(5), Exit()}, "is outside the program"},
      {"jump_backwards_out", {MovImm(0, 0), Ja(-3), Exit()}, "is outside the program"},
      {"ld_imm64_half", {ld_half, Exit()}, "ld_imm64 is missing its second half"},
      {"unknown_alu_op", {MovImm(0, 0), bad_alu, Exit()}, "unknown ALU opcode"},
      {"falls_off_end", {MovImm(0, 0)}, "falls off the end"},
      {"bpf_to_bpf_call", {pseudo_call, MovImm(0, 0), Exit()}, "call of another function"},
      {"alu32_on_pointer", {Alu32Imm(kAluAdd, 1, 8), MovImm(0, 0), Exit()},
       "32-bit arithmetic on a pointer"},
      {"ctx_to_number", {Alu32Reg(kAluMov, 2, 1), MovImm(0, 0), Exit()},
       "context pointer cannot be converted"},
      {"atomic_on_ctx", {MovImm(2, 1), Atomic(kSizeDw, 1, 2, 72, kAluAdd), MovImm(0, 0), Exit()},
       "atomic operation on the context"},
      {"unknown_atomic", {MovImm(2, 1), StImm(kSizeDw, 10, -8, 0),
                          Atomic(kSizeDw, 10, 2, -8, 0x10), MovImm(0, 0), Exit()},
       "unknown atomic operation"},
      {"atomic_on_uninit_stack", {MovImm(2, 1), Atomic(kSizeDw, 10, 2, -8, kAluAdd | kAtomicFetch),
                                  MovImm(0, 0), Exit()},
       "atomic operation reads uninitialised stack"},
      {"bad_division_offset", {MovImm(0, 7), bad_div, Exit()}, "invalid offset on a division"},
      {"byte_swap_8", {MovImm(0, 7), bswap8, Exit()}, "byte swap of 8 bits"},
      {"stack_read_above_frame", {Ldx(kSizeDw, 0, 10, 8), Exit()}, "is outside the stack"},
      {"stack_below_512", {StImm(kSizeDw, 10, -520, 1), MovImm(0, 0), Exit()},
       "is outside the stack"},
      {"misaligned_stack", {StImm(kSizeW, 10, -6, 1), MovImm(0, 0), Exit()},
       "misaligned stack access"},
      {"uninit_stack_read", {Ldx(kSizeDw, 0, 10, -16), Exit()},
       "reads uninitialised stack at fp-16"},
      {"scalar_deref", {MovImm(2, 4096), Ldx(kSizeDw, 0, 2, 0), Exit()},
       "R2 is a scalar, not a pointer"},
      {"helper_clobbers_r1", {Call(CUPROBE_HELPER_KTIME_GET_NS), MovReg(0, 1), Exit()},
       "clobbered by every helper call"},
      {"helper_uninit_arg", {Call(CUPROBE_HELPER_KTIME_GET_NS), Call(CUPROBE_HELPER_MAP_DELETE_ELEM),
                             MovImm(0, 0), Exit()},
       "argument 1 of map_delete_elem: R1 is read before it is initialised"},
      {"variable_stack_write",
       {Ldx(kSizeW, 2, 1, 4), Alu64Imm(kAluAnd, 2, 8), MovReg(3, 10), Alu64Imm(kAluAdd, 3, -16),
        Alu64Reg(kAluAdd, 3, 2), StImm(kSizeB, 3, 0, 1), MovImm(0, 0), Exit()},
       "stack write at a variable offset"},
      {"unrelated_pointer_sub", {MovReg(2, 10), Alu64Reg(kAluSub, 2, 1), MovImm(0, 0), Exit()},
       "subtraction of unrelated pointers"},
      {"program_too_long", std::vector<Insn>(5000, MovImm(0, 0)), "over the budget of 4096"},
      {"map_pointer_deref", Concat({{Insn{kLdImm64, 1, kPseudoMapFd, 0, 0}, Insn{}},
                                    {Ldx(kSizeDw, 0, 1, 0), Exit()}}),
       "R1 is a map", {HashMap("m", 4, 8)}},
      {"arith_on_nullable", Concat({{StImm(kSizeW, 10, -4, 0), MovReg(2, 10),
                                     Alu64Imm(kAluAdd, 2, -4)},
                                    {Insn{kLdImm64, 1, kPseudoMapFd, 0, 0}, Insn{}},
                                    {Call(CUPROBE_HELPER_MAP_LOOKUP_ELEM),
                                     Alu64Imm(kAluAdd, 0, 8), MovImm(0, 0), Exit()}}),
       "arithmetic on a map value pointer that may be NULL", {HashMap("m", 4, 8)}},
  };
}

// ---- Must pass ----------------------------------------------------------------

const Case kPass[] = {
    {"lookup_checked_atomic", R"(SEC("cuprobe/exit/*") int p(struct cuprobe_ctx *ctx) {
       u32 k = ctx->kernel_id; u64 *v = bpf_map_lookup_elem(&h, &k);
       if (v) __sync_fetch_and_add(v, 1); return 0; })", ""},
    {"map_add", R"(SEC("cuprobe/exit/*") int p(struct cuprobe_ctx *ctx) {
       u32 k = ctx->sm_id; cuprobe_map_add(&h, &k, 1); return 0; })", ""},
    {"hist_add", R"(SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
       cuprobe_hist_log2(&hist, ctx->clock); return 0; })", ""},
    {"ringbuf_reserve_submit", R"(SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
       struct event *e = bpf_ringbuf_reserve(&rb, sizeof(*e), 0); if (!e) return 0;
       e->ts = ctx->global_timer; e->sm = ctx->sm_id; e->block = ctx->block_idx[0];
       bpf_ringbuf_submit(e, 0); return 0; })", ""},
    {"ringbuf_discard_branch", R"(SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
       struct event *e = bpf_ringbuf_reserve(&rb, sizeof(*e), 0); if (!e) return 0;
       e->ts = ctx->clock;
       if (ctx->lane_id != 0) { bpf_ringbuf_discard(e, 0); return 0; }
       bpf_ringbuf_submit(e, 0); return 0; })", ""},
    {"ringbuf_output_stack", R"(SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
       struct event e = {.ts = ctx->global_timer, .sm = ctx->sm_id, .block = 7};
       bpf_ringbuf_output(&rb, &e, sizeof(e), 0); return 0; })", ""},
    {"printk", R"(SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
       bpf_printk("block %u thread %u", ctx->block_idx[0], ctx->thread_idx[0]); return 0; })", ""},
    {"bounded_loop", R"(SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
       u64 sum = 0;
       for (int i = 0; i < 16; i++) sum += ctx->args[i] ^ (u64)i;
       u32 k = 1; cuprobe_map_add(&h, &k, sum); return 0; })", ""},
    {"checked_index", R"(SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
       u32 k = 0; struct val *v = bpf_map_lookup_elem(&arr, &k); if (!v) return 0;
       u64 i = ctx->args[1]; if (i < 4) __sync_fetch_and_add(&v->arr[i], 1);
       return 0; })", ""},
    {"all_ctx_fields", R"(SEC("cuprobe/mem/*") int p(struct cuprobe_ctx *ctx) {
       u64 s = ctx->kind + ctx->kernel_id + ctx->block_idx[0] + ctx->block_idx[1] +
           ctx->block_idx[2] + ctx->thread_idx[0] + ctx->thread_idx[1] + ctx->thread_idx[2] +
           ctx->block_dim[0] + ctx->block_dim[1] + ctx->block_dim[2] + ctx->grid_dim[0] +
           ctx->grid_dim[1] + ctx->grid_dim[2] + ctx->sm_id + ctx->warp_id + ctx->lane_id +
           ctx->active_mask + ctx->global_timer + ctx->clock + ctx->mem_addr + ctx->mem_size +
           ctx->mem_space + ctx->mem_kind + ctx->site_index + ctx->num_args + ctx->args[15];
       u32 k = 0; cuprobe_map_add(&h, &k, s); return 0; })", ""},
    {"dynamic_arg", R"(SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
       u32 k = 2; cuprobe_map_add(&h, &k, cuprobe_get_arg(ctx, ctx->lane_id)); return 0; })", ""},
    {"bss_counter", R"(u64 calls = 0;
       SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
       __sync_fetch_and_add(&calls, 1); return 0; })", ""},
    {"data_and_rodata", R"(u64 scale = 3; const volatile u32 target_sm = 4;
       SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
       if (ctx->sm_id != target_sm) return 0; scale = scale * 2 + 1; return 0; })", ""},
    {"bpftime_helpers", R"(SEC("kprobe/vec_add") int p(struct cuprobe_ctx *ctx) {
       u64 x, y, z; bpf_get_block_idx(&x, &y, &z);
       u64 tx, ty, tz; bpf_get_thread_idx(&tx, &ty, &tz);
       u32 k = (u32)(x + tx); u64 t = bpf_get_globaltimer(); bpf_gpu_membar();
       cuprobe_map_add(&h, &k, t); return 0; })", ""},
    {"kretprobe_section", R"(SEC("kretprobe/vec_add") int p(struct cuprobe_ctx *ctx) {
       u32 k = ctx->site_index; cuprobe_map_add(&h, &k, 1); return 0; })", ""},
    {"memcapture", R"(SEC("kprobe/__memcapture") int p(struct cuprobe_ctx *ctx) {
       if (ctx->mem_kind == CUPROBE_ACCESS_STORE) cuprobe_hist_log2(&hist, ctx->mem_addr);
       return 0; })", ""},
    {"update_delete", R"(SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
       u32 k = ctx->warp_id; u64 v = ctx->clock;
       bpf_map_update_elem(&h, &k, &v, BPF_ANY);
       if (v & 1) bpf_map_delete_elem(&h, &k); return 0; })", ""},
    {"perf_event_output", R"(SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
       u64 ts = ctx->global_timer; bpf_perf_event_output(ctx, &rb, 0, &ts, sizeof(ts));
       return 0; })", ""},
    {"switch_statement", R"(SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
       u32 k;
       switch (ctx->lane_id) { case 0: k = 10; break; case 1: k = 11; break;
                               case 5: k = 12; break; default: k = 13; }
       cuprobe_map_add(&h, &k, 1); return 0; })", ""},
    {"spills_across_calls", R"(SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
       u64 a = ctx->clock, b = ctx->global_timer, c = ctx->sm_id, d = ctx->warp_id,
           e = ctx->lane_id, f = ctx->kernel_id;
       u32 k = 1; cuprobe_map_add(&h, &k, a); k = 2; cuprobe_map_add(&h, &k, b);
       k = 3; cuprobe_map_add(&h, &k, c * d); k = 4; cuprobe_map_add(&h, &k, e + f + a * b);
       return 0; })", ""},
    {"alu32_and_bswap", R"(SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
       u32 x = ctx->thread_idx[0]; u32 y = (x << 3) ^ (x >> 2) ^ __builtin_bswap32(x);
       y = y / (ctx->lane_id | 1); y %= 97; u32 k = y & 63;
       cuprobe_map_add(&h, &k, __builtin_bswap64(ctx->clock)); return 0; })", ""},
    {"atomic_fetch_variants", R"(SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
       u32 k = 0; struct val *v = bpf_map_lookup_elem(&arr, &k); if (!v) return 0;
       u64 old = __sync_fetch_and_add(&v->a, 2); __sync_fetch_and_or(&v->arr[0], old);
       __sync_fetch_and_and(&v->arr[1], 0xff); __sync_fetch_and_xor(&v->arr[2], old);
       u64 prev = __sync_lock_test_and_set(&v->arr[3], ctx->clock);
       __sync_val_compare_and_swap(&v->b, (u32)prev, 7);
       __sync_fetch_and_add(&v->c, 1); return 0; })", ""},
    {"two_programs", R"(SEC("cuprobe/entry/k1") int a(struct cuprobe_ctx *ctx) {
       u32 k = 1; cuprobe_map_add(&h, &k, 1); return 0; }
       SEC("cuprobe/exit/k2") int b(struct cuprobe_ctx *ctx) {
       u32 k = 2; cuprobe_map_add(&h, &k, 1); return 0; })", ""},
    {"puts", R"(SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
       if (ctx->thread_idx[0] == 0) bpf_puts("block started"); return 0; })", ""},
    {"thread_id_grid", R"(SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
       u64 gx, gy, gz; cuprobe_grid_dim(&gx, &gy, &gz);
       u32 k = (u32)(cuprobe_global_thread_id() % (gx * gy * gz + 1));
       u64 *v = bpf_map_lookup_elem(&per, &k); if (v) *v += 1; return 0; })", ""},
    {"is_block_leader_and_kind", R"(SEC("cuprobe/exit/*") int p(struct cuprobe_ctx *ctx) {
       if (!cuprobe_is_block_leader(ctx) || ctx->kind != CUPROBE_ATTACH_EXIT) return 0;
       u32 k = 9; cuprobe_map_add(&h, &k, ctx->block_dim[0] * ctx->grid_dim[0]); return 0; })", ""},
};

absl::Status VerifyAll(const BpfObject& obj, const VerifierOptions& options) {
  for (const BpfProgram& p : obj.programs) {
    absl::StatusOr<VerifiedProgram> v = Verify(obj, p, options);
    if (!v.ok()) return v.status();
  }
  return absl::OkStatus();
}

class RejectC : public ::testing::TestWithParam<Case> {};

TEST_P(RejectC, IsRejectedWithItsMessageAndSourceLine) {
  const Case& c = GetParam();
  absl::StatusOr<std::vector<uint8_t>> object =
      CompileProbeSource(absl::StrCat(kPrelude, c.body));
  ASSERT_TRUE(object.ok()) << object.status();
  absl::StatusOr<BpfObject> obj = ReadBpfObject(*object, "probe.bpf.c");
  ASSERT_TRUE(obj.ok()) << obj.status();
  VerifierOptions options;
  options.max_steps = 200'000;  // the unbounded-loop case gives up sooner
  const absl::Status s = VerifyAll(*obj, options);
  ASSERT_FALSE(s.ok()) << c.name << " was accepted";
  EXPECT_THAT(std::string(s.message()), HasSubstr(c.expected));
  // Verifier rejections (not attach-point errors) name the file, line and insn.
  if (std::string(s.message()).find("attach") == std::string::npos &&
      std::string(s.message()).find("no kernel") == std::string::npos) {
    EXPECT_THAT(std::string(s.message()), HasSubstr("probe.bpf.c:"));
    EXPECT_THAT(std::string(s.message()), HasSubstr(") insn "));
  }
}

INSTANTIATE_TEST_SUITE_P(Verifier, RejectC, ::testing::ValuesIn(kRejectC),
                         [](const auto& info) { return std::string(info.param.name); });

class RejectRaw : public ::testing::TestWithParam<RawCase> {};

TEST_P(RejectRaw, IsRejectedWithItsMessage) {
  const RawCase& c = GetParam();
  BpfObject obj = RawObject(c.insns, c.maps);
  const absl::Status s = VerifyAll(obj, VerifierOptions{});
  ASSERT_FALSE(s.ok()) << c.name << " was accepted";
  EXPECT_THAT(std::string(s.message()), HasSubstr(c.expected));
  EXPECT_THAT(std::string(s.message()), HasSubstr("program 'raw'"));
}

INSTANTIATE_TEST_SUITE_P(Verifier, RejectRaw, ::testing::ValuesIn(RawRejects()),
                         [](const auto& info) { return std::string(info.param.name); });

class Pass : public ::testing::TestWithParam<Case> {};

TEST_P(Pass, IsAcceptedLoweredAndAssembledByPtxas) {
  const Case& c = GetParam();
  absl::StatusOr<std::vector<uint8_t>> object =
      CompileProbeSource(absl::StrCat(kPrelude, c.body));
  ASSERT_TRUE(object.ok()) << object.status();
  ProbeCompileOptions options;
  absl::StatusOr<CompileResult> r = CompileObject(*object, "probe.bpf.c", options);
  ASSERT_TRUE(r.ok()) << r.status();
  for (const ProbeProgram& p : r->bundle.programs) {
    EXPECT_THAT(r->bundle.ptx, HasSubstr(absl::StrCat(".visible .func  (.param .b32 func_retval0) ",
                                                      p.ptx_function, "(")));
  }
  EXPECT_THAT(r->bundle.ptx, HasSubstr(".target sm_90"));
  EXPECT_TRUE(PtxasAccepts(r->bundle.ptx).ok()) << PtxasAccepts(r->bundle.ptx) << r->bundle.ptx;
}

INSTANTIATE_TEST_SUITE_P(Verifier, Pass, ::testing::ValuesIn(kPass),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(VerifierSuite, HasAtLeastFortyRejectsAndTwentyPasses) {
  EXPECT_GE(std::size(kRejectC) + RawRejects().size(), 40u);
  EXPECT_GE(std::size(kPass), 20u);
}

TEST(Verifier, RejectionCarriesSourceTextAndHint) {
  absl::StatusOr<std::vector<uint8_t>> object = CompileProbeSource(absl::StrCat(kPrelude, R"(
SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
  u32 k = ctx->kernel_id;
  u64 *v = bpf_map_lookup_elem(&h, &k);
  return *v + 1;
})"));
  ASSERT_TRUE(object.ok()) << object.status();
  absl::StatusOr<BpfObject> obj = ReadBpfObject(*object, "probe.bpf.c");
  ASSERT_TRUE(obj.ok()) << obj.status();
  const absl::Status s = VerifyAll(*obj, {});
  ASSERT_FALSE(s.ok());
  const std::string m(s.message());
  // The prelude has 15 lines; `return *v + 1;` is line 18.
  EXPECT_THAT(m, HasSubstr("probe.bpf.c:18:"));
  EXPECT_THAT(m, HasSubstr("return *v + 1;"));
  EXPECT_THAT(m, HasSubstr("hint: check the pointer against NULL"));
}

TEST(Verifier, BudgetIsConfigurable) {
  std::vector<Insn> insns(100, MovImm(0, 0));
  insns.push_back(Exit());
  BpfObject obj = RawObject(insns);
  EXPECT_TRUE(VerifyAll(obj, {}).ok());
  VerifierOptions small;
  small.max_insns = 50;
  EXPECT_THAT(std::string(VerifyAll(obj, small).message()), HasSubstr("over the budget of 50"));
  VerifierOptions few_steps;
  few_steps.max_steps = 20;
  EXPECT_THAT(std::string(VerifyAll(obj, few_steps).message()), HasSubstr("too complex"));
}

TEST(Verifier, PrunesStatesOfIndependentBranches) {
  // 24 if/else diamonds whose sides end in the same state: 2^24 paths
  // without pruning, a few hundred instructions with it.
  std::vector<Insn> insns = {Ldx(kSizeW, 6, 1, 56), MovImm(0, 0)};
  for (int i = 0; i < 24; ++i) {
    insns.push_back(JmpImm(kJmpJset, 6, 1 << (i % 16), 2));
    insns.push_back(MovImm(9, 5));
    insns.push_back(Ja(1));
    insns.push_back(MovImm(9, 5));
  }
  insns.push_back(Exit());
  BpfObject obj = RawObject(insns);
  absl::StatusOr<VerifiedProgram> v = Verify(obj, obj.programs[0], {});
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_LT(v->steps, 1000u);
}

}  // namespace
}  // namespace cuprobe
