// SPDX-License-Identifier: GPL-2.0
/*
 * The launches libkv's CUDA host code makes, recorded without running a
 * kernel: the split plan and launch configuration as the kernels get them,
 * from the SAME host functions (libkv/attn/cuda_*.cu compiled for the CPU
 * stand-in, tests/simt), for tests/ptx/ptx_check.py.
 *
 * The build links the stand-in's objects with kv_simt::launch() and
 * kv_simt::occupancy() made weak (objcopy), so that the definitions below
 * take every launch and occupancy question.  A launch writes
 *
 *   launch CASE MANGLED-KERNEL GX GY GZ BX BY BZ DYN-SMEM
 *
 * and returns.  The stand-in device has 132 SMs (an H100 SXM's or an
 * H200's); when the host code asks for occupancy
 * (cudaOccupancyMaxActiveBlocksPerMultiprocessor), the answer comes from
 * the resources ptxas reported for that kernel on sm_90 (the file named by
 * $PTX_PROBE_RESOURCES: lines "MANGLED REGS STATIC-SMEM MAXNTID") through
 * NVIDIA's calculator, as the real runtime would answer on the card:
 *
 *   occupancy CASE MANGLED-KERNEL BLOCK-THREADS DYN-SMEM -> BLOCKS
 *   occupancy-miss CASE KERNEL      (no ptxas figures for it: an error)
 *
 * Cases, one a line on stdin:
 *   decode CASE DTYPE DIM N_KV N_Q BATCH CTX TOKENS-PER-PAGE
 *   extend CASE DTYPE DIM N_KV N_Q BATCH PREFIX NEW TOKENS-PER-PAGE
 * DTYPE: f16 or bf16; an extend case also writes its new tokens' KV
 * (kv_attn_write_cuda).  After each case: "ret CASE RC" (the entry points'
 * return value).  Nothing is read or written through the pointers passed:
 * no kernel runs.
 *
 * launch_probe --occupancy: NVIDIA's occupancy calculator alone (the
 * checker's), lines "SM THREADS REGS STATIC-SMEM DYN-SMEM MAXNTID" on stdin,
 * "BLOCKS WARPS LIMIT" out.
 */
#include <dlfcn.h>
#include <map>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <string>
#include <vector>

#include "simt.h"
#include <kvshare/attn.h>

#include "occupancy.h"

static const char *cur_case = "-";

namespace kv_simt {
void launch(const char *name, dim3 grid, dim3 block, size_t smem, cudaStream_t s,
	    void (*thunk)(void *), void *ctx, size_t ctx_size)
{
	void *kernel = ctx_size >= sizeof(void *) ? *(void **)ctx : NULL;
	Dl_info di;
	const char *sym = name;

	(void)s;
	(void)thunk;
	/* The stand-in's launcher puts the kernel's pointer first in @ctx. */
	if (kernel && dladdr(kernel, &di) && di.dli_sname && di.dli_saddr == kernel)
		sym = di.dli_sname;
	printf("launch %s %s %u %u %u %u %u %u %zu\n", cur_case, sym, grid.x, grid.y,
	       grid.z, block.x, block.y, block.z, smem);
}
} /* namespace kv_simt */

struct res {
	int regs, maxntid;
	size_t smem;
};

static std::map<std::string, res> resources(void)
{
	std::map<std::string, res> m;
	const char *path = getenv("PTX_PROBE_RESOURCES");
	char name[512];
	res r;
	FILE *f;

	if (!path || !(f = fopen(path, "r")))
		return m;
	while (fscanf(f, "%511s %d %zu %d", name, &r.regs, &r.smem, &r.maxntid) == 4)
		m[name] = r;
	fclose(f);
	return m;
}

namespace kv_simt {
/*
 * The stand-in's occupancy model (cudaOccupancyMaxActiveBlocksPerMultiprocessor
 * of tests/simt/simt.h calls it) assumes 64 registers a thread; here the
 * answer is the card's, from what ptxas reported for the kernel on sm_90.
 */
int occupancy(const void *kernel, int block_threads, size_t dyn_smem)
{
	static std::map<std::string, res> m = resources();
	struct ptx_occ o;
	Dl_info di;

	if (!kernel || !dladdr(kernel, &di) || !di.dli_sname || !m.count(di.dli_sname)) {
		printf("occupancy-miss %s %s\n", cur_case,
		       kernel && dladdr(kernel, &di) && di.dli_sname ? di.dli_sname : "?");
		return 1;
	}
	const res &r = m[di.dli_sname];
	if (ptx_occupancy(90, block_threads, r.regs, r.smem, dyn_smem, r.maxntid, &o))
		return 0;
	printf("occupancy %s %s %d %zu -> %d\n", cur_case, di.dli_sname, block_threads, dyn_smem,
	       o.blocks);
	return o.blocks;
}
} /* namespace kv_simt */

static int one_case(char *line)
{
	char kind[16], name[64], dt[8];
	unsigned dim, n_kv, n_q, batch, a1, a2 = 0, tpp;
	int n, ret;

	n = sscanf(line, "%15s %63s %7s %u %u %u %u %u %u %u", kind, name, dt, &dim, &n_kv,
		   &n_q, &batch, &a1, &a2, &tpp);
	bool ext = !strcmp(kind, "extend");
	if (!ext && n == 9)
		tpp = a2, a2 = 0;
	if ((ext && n != 10) || (!ext && (strcmp(kind, "decode") || n != 9)) || !batch ||
	    !tpp || !n_kv) {
		fprintf(stderr, "launch_probe: bad case: %s", line);
		return -1;
	}
	/* decode: a1 = context (the new token included); extend: a1 = prefix, a2 = new. */
	uint32_t seq = ext ? a1 + a2 : a1, per = (seq + tpp - 1) / tpp;
	std::vector<uint32_t> indptr(batch + 1), pages((size_t)batch * per), lens(batch, seq);
	std::vector<uint32_t> qptr(batch + 1);
	for (uint32_t r = 0; r <= batch; r++) {
		indptr[r] = r * per;
		qptr[r] = r * a2;
	}
	for (size_t i = 0; i < pages.size(); i++)
		pages[i] = (uint32_t)i;

	static char dummy[4096] __attribute__((aligned(256)));
	struct kv_attn_kv kv = {};
	kv.base = dummy;
	kv.n_pages = pages.size();
	kv.geom.n_layers = 1;
	kv.geom.n_kv_heads = n_kv;
	kv.geom.head_dim = dim;
	kv.geom.tokens_per_page = tpp;
	kv.geom.dtype = !strcmp(dt, "bf16") ? KVS_DTYPE_BF16 : KVS_DTYPE_F16;
	struct kv_attn_batch b = {};
	b.n_reqs = batch;
	b.max_seq_len = seq;
	b.max_q_len = ext ? a2 : 1;
	b.page_indptr = indptr.data();
	b.pages = pages.data();
	b.seq_lens = lens.data();
	b.q_indptr = ext ? qptr.data() : NULL;
	struct kv_attn_params p = {};
	p.n_q_heads = n_q;

	cur_case = name;
	ret = ext ? kv_attn_extend_cuda(&kv, &b, &p, dummy, dummy, NULL) :
		    kv_attn_decode_cuda(&kv, &b, &p, dummy, dummy, NULL);
	/* The KV write of the same new tokens: its kernel's launch too. */
	if (!ret && ext)
		ret = kv_attn_write_cuda(&kv, &b, &p, dummy, dummy);
	printf("ret %s %d\n", name, ret);
	return 0;
}

/* --occupancy: lines "SM THREADS REGS STATIC-SMEM DYN-SMEM MAXNTID" -> "BLOCKS WARPS LIMIT". */
static int occupancy_mode(void)
{
	int sm, threads, regs, maxntid;
	size_t smem, dyn;
	struct ptx_occ o;

	while (scanf("%d %d %d %zu %zu %d", &sm, &threads, &regs, &smem, &dyn, &maxntid) == 6) {
		if (ptx_occupancy(sm, threads, regs, smem, dyn, maxntid, &o))
			printf("0 0 unknown arch or block size\n");
		else
			printf("%d %d %s\n", o.blocks, o.warps, o.limit);
	}
	return 0;
}

int main(int argc, char **argv)
{
	char line[256];
	int bad = 0;

	if (argc > 1 && !strcmp(argv[1], "--occupancy"))
		return occupancy_mode();
	while (fgets(line, sizeof(line), stdin))
		if (line[0] != '#' && line[0] != '\n')
			bad |= one_case(line) != 0;
	return bad ? 2 : 0;
}
