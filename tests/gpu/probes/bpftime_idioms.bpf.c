// Test probe: bpftime's GPU idioms, run on the GPU against vec_add
// (tests/gpu/run_test.cc, Run.BpftimeIdioms*): kprobe/kretprobe sections
// with mangled names, helpers declared by number, an array bumped through
// bpf_map_lookup_elem, a printk whose two formats clang merges into one
// call, helper 507 (the thread leaves its kernel), and bpftime's perf-event
// ring (map type 1527) written with a NULL context.
#define BPF_NO_GLOBAL_DATA
#include <vmlinux.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

static const u64 (*gpu_block_idx)(u64 *x, u64 *y, u64 *z) = (void *)503;
static const u64 (*gpu_block_dim)(u64 *x, u64 *y, u64 *z) = (void *)504;
static const u64 (*gpu_thread_idx)(u64 *x, u64 *y, u64 *z) = (void *)505;
static const u64 (*gpu_exit)(void) = (void *)507;
static const u64 (*gpu_grid_dim)(u64 *x, u64 *y, u64 *z) = (void *)508;

struct block_event {
	u64 block;
	u64 threads;
};

// 0: vec_add entries, 1: vec_add exits, 2: scale exits.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 3);
	__type(key, u32);
	__type(value, u64);
} counts SEC(".maps");

struct {
	__uint(type, 1527);
	__uint(max_entries, 65536);
	__type(key, u32);
	__type(value, struct block_event);
} blocks SEC(".maps");

static __always_inline void bump(u32 key)
{
	u64 *v = bpf_map_lookup_elem(&counts, &key);
	if (v)
		__atomic_add_fetch(v, 1, __ATOMIC_SEQ_CST);
}

SEC("kprobe/_Z7vec_addPKfS0_Pfi")
int vec_add_entry()
{
	u64 x, y, z, bx;
	gpu_thread_idx(&x, &y, &z);
	gpu_block_idx(&bx, &y, &z);
	bump(0);
	if (bx == 0 && x < 2) {
		if (x & 1)
			bpf_printk("odd thread %lu\n", x);
		else
			bpf_printk("even thread %lu!\n", x);
	}
	return 0;
}

SEC("kretprobe/_Z7vec_addPKfS0_Pfi")
int vec_add_exit()
{
	u64 x, y, z;
	struct block_event ev = {};
	gpu_thread_idx(&x, &y, &z);
	bump(1);
	if (x == 0) {
		gpu_block_idx(&ev.block, &y, &z);
		gpu_block_dim(&ev.threads, &y, &z);
		bpf_perf_event_output(NULL, &blocks, BPF_F_CURRENT_CPU, &ev, sizeof(ev));
	}
	return 0;
}

// The upper half of scale's grid leaves before scaling anything.
SEC("kprobe/_Z5scalePffi")
int scale_entry()
{
	u64 bx, gx, y, z;
	gpu_block_idx(&bx, &y, &z);
	gpu_grid_dim(&gx, &y, &z);
	if (bx >= gx / 2)
		gpu_exit();
	return 0;
}

SEC("kretprobe/_Z5scalePffi")
int scale_exit()
{
	bump(2);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
