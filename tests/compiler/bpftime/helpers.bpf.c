// Fixture of tests/compiler/bpftime_compat_test.cc: every GPU helper of
// bpftime (ids 501-511), declared by number as bpftime's examples do.
#define BPF_NO_GLOBAL_DATA
#include <vmlinux.h>
#include <bpf/bpf_helpers.h>

static const void (*gpu_puts)(const char *) = (void *)501;
static const u64 (*gpu_globaltimer)(void) = (void *)502;
static const u64 (*gpu_block_idx)(u64 *x, u64 *y, u64 *z) = (void *)503;
static const u64 (*gpu_block_dim)(u64 *x, u64 *y, u64 *z) = (void *)504;
static const u64 (*gpu_thread_idx)(u64 *x, u64 *y, u64 *z) = (void *)505;
static const u64 (*gpu_membar)(void) = (void *)506;
static const u64 (*gpu_exit)(void) = (void *)507;
static const u64 (*gpu_grid_dim)(u64 *x, u64 *y, u64 *z) = (void *)508;
static const u64 (*gpu_sm_id)(void) = (void *)509;
static const u64 (*gpu_warp_id)(void) = (void *)510;
static const u64 (*gpu_lane_id)(void) = (void *)511;

struct where {
	u64 sm, warp, lane;
	u64 block, thread, block_dim, grid_dim;
	u64 when;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, u32);
	__type(value, struct where);
} placement SEC(".maps");

SEC("kprobe/_Z7reducePfi")
int place()
{
	struct where w = {};
	u64 y, z;
	w.sm = gpu_sm_id();
	w.warp = gpu_warp_id();
	w.lane = gpu_lane_id();
	gpu_block_idx(&w.block, &y, &z);
	gpu_thread_idx(&w.thread, &y, &z);
	gpu_block_dim(&w.block_dim, &y, &z);
	gpu_grid_dim(&w.grid_dim, &y, &z);
	w.when = gpu_globaltimer();
	u32 key = (u32)(w.block * w.block_dim + w.thread);
	bpf_map_update_elem(&placement, &key, &w, BPF_ANY);
	if (w.lane == 31) {
		char msg[] = "a warp's last lane\n";
		gpu_puts(msg);
	}
	// The upper half of the grid does not run the kernel.
	if (w.block >= w.grid_dim / 2) {
		gpu_membar();
		gpu_exit();
	}
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
