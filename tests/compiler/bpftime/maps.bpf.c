// Fixture of tests/compiler/bpftime_compat_test.cc: bpftime's GPU map type
// numbers, and bpf_perf_event_output with a NULL context into its GPU ring
// buffer, whose max_entries counts records.
#define BPF_NO_GLOBAL_DATA
#include <vmlinux.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

struct event {
	u64 when;
	u64 thread;
};

struct {
	__uint(type, 1501);
	__uint(max_entries, 64);
	__type(key, u32);
	__type(value, u64);
} gpu_hash SEC(".maps");

struct {
	__uint(type, 1502);
	__uint(max_entries, 2);
	__type(key, u32);
	__type(value, u64);
} per_thread SEC(".maps");

struct {
	__uint(type, 1503);
	__uint(max_entries, 8);
	__type(key, u32);
	__type(value, u64);
} gpu_array SEC(".maps");

struct {
	__uint(type, 1504);
	__uint(max_entries, 4);
	__type(key, u32);
	__type(value, u64);
	__uint(map_flags, BPF_F_MMAPABLE);
} kernel_shared SEC(".maps");

struct {
	__uint(type, 1512);
	__uint(max_entries, 3);
	__type(key, u32);
	__type(value, u64);
} per_thread_host SEC(".maps");

struct {
	__uint(type, 1513);
	__uint(max_entries, 5);
	__type(key, u32);
	__type(value, u64);
} array_host SEC(".maps");

struct {
	__uint(type, 1527);
	__uint(max_entries, 16);
	__type(key, u32);
	__type(value, struct event);
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u64);
} plain_array SEC(".maps");

static const u64 (*gpu_globaltimer)(void) = (void *)502;
static const u64 (*gpu_thread_idx)(u64 *x, u64 *y, u64 *z) = (void *)505;

static __always_inline void bump(void *map, u32 key)
{
	u64 *v = bpf_map_lookup_elem(map, &key);
	if (v)
		__atomic_add_fetch(v, 1, __ATOMIC_SEQ_CST);
}

SEC("kretprobe/_Z6vecAddPfS_S_i")
int count_and_emit()
{
	struct event ev = {};
	u64 y, z;
	gpu_thread_idx(&ev.thread, &y, &z);
	ev.when = gpu_globaltimer();
	u32 key = (u32)(ev.thread & 1);
	u64 one = 1;
	bpf_map_update_elem(&gpu_hash, &key, &one, BPF_NOEXIST);
	bump(&per_thread, key);
	bump(&gpu_array, key);
	bump(&kernel_shared, key);
	bump(&per_thread_host, key);
	bump(&array_host, key);
	bump(&plain_array, 0);
	if (ev.thread == 0)
		bpf_perf_event_output(NULL, &events, BPF_F_CURRENT_CPU, &ev, sizeof(ev));
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
