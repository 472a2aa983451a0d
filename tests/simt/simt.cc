// SPDX-License-Identifier: MIT
/*
 * The CPU stand-in for the GPU (test-only; see simt.h): fibers, the block
 * scheduler, warp collectives and barriers, the shared-memory checker.
 * The runtime calls are simt_runtime.cc's.
 *
 * Environment:
 *   KV_SIMT_SEED   scheduling seed; 0 or unset: threads in index order every
 *                  round; otherwise every round of every block is shuffled
 *                  by a generator seeded from it, the launch and the block.
 *   KV_SIMT_VERBOSE  1: a line per launch, with the shared accesses checked.
 */
#include "simt.h"

#include <cxxabi.h>
#include <errno.h>
#include <fcntl.h>
#include <elf.h>
#include <link.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

uint3 threadIdx, blockIdx;
dim3 blockDim, gridDim;

/*
 * The context switch: save the callee-saved registers on the old stack,
 * store its pointer in *save, load @to's.  MXCSR and the x87 control word
 * are not switched (nothing in a kernel or here changes them; loading them
 * on every switch cost a fifth of the run time): every fiber starts with
 * the launching thread's.
 */
extern "C" void kv_simt_switch(void **save, void *to);
asm(".text\n"
    ".globl kv_simt_switch\n"
    ".hidden kv_simt_switch\n"
    ".type kv_simt_switch, @function\n"
    "kv_simt_switch:\n"
    "	pushq %rbp\n"
    "	pushq %rbx\n"
    "	pushq %r12\n"
    "	pushq %r13\n"
    "	pushq %r14\n"
    "	pushq %r15\n"
    "	subq $8, %rsp\n"
    "	movq %rsp, (%rdi)\n"
    "	movq %rsi, %rsp\n"
    "	addq $8, %rsp\n"
    "	popq %r15\n"
    "	popq %r14\n"
    "	popq %r13\n"
    "	popq %r12\n"
    "	popq %rbx\n"
    "	popq %rbp\n"
    "	ret\n"
    ".size kv_simt_switch, .-kv_simt_switch\n");

extern "C" char __executable_start[], _end[];

namespace kv_simt {
namespace {

#if !defined(__x86_64__)
#error "the stand-in's context switch is x86-64 only"
#endif

constexpr size_t STACK_BYTES = 256 << 10;
constexpr int MAX_REPORTS = 4;		/* printed per launch; the rest counted */

enum tstate { T_RUN, T_COLL, T_BAR, T_EXIT };

/* A cp.async whose group is not retired yet: the bytes it will write. */
struct cp_pend {
	char *dst;
	unsigned int n;
	uint32_t group;			/* CP_OPEN until a commit_group */
	unsigned char data[16];
};
constexpr uint32_t CP_OPEN = UINT32_MAX;

struct thr {
	void *sp;
	char *stack;			/* mapping: a guard page, then the stack */
	tstate st;
	uint3 tid;
	/* waiting at a collective */
	coll_kind kind;
	unsigned int mask;
	uint64_t val, res;
	int arg, width;
	/* waiting at a collective or a barrier: where */
	const char *file;
	int line;
	/* its cp.async copies not yet landed, and the groups it committed */
	std::vector<cp_pend> cp;
	uint32_t cp_groups;
};

/* Per 4-byte word of shared memory. */
struct shadow {
	uint32_t blk;			/* last block that wrote it */
	uint32_t w_int, r_int;		/* barrier intervals of the last write, reads */
	uint16_t writer, reader;	/* linear thread ids: the last writer, the first reader */
	bool many;			/* and other threads read it too */
	bool pending;			/* a cp.async will write it */
};

/* A static object of the executable: a kernel's __shared__ array or not. */
struct srange {
	uintptr_t lo, hi;
	bool shared;
	std::string name, mangled;
	std::vector<shadow> sh;
};

/* A function of the executable, for the occupancy model. */
struct fsym {
	uintptr_t addr;
	std::string mangled;
};

struct state {
	std::vector<thr> t;
	unsigned int n;			/* threads in the running block */
	std::vector<unsigned int> runq;
	uint32_t runbits[32];		/* threads to run next round */
	uint16_t warp_wait[32];		/* lanes waiting at a collective */
	uint16_t warp_live[32];		/* lanes not exited */
	std::vector<unsigned int> ready;	/* warps whose live lanes all wait */
	unsigned int n_live, n_bar;
	size_t pos;
	void *main_sp;
	thr *cur;
	void (*thunk)(void *);
	void *ctx;
	size_t ctx_size;
	uintptr_t dev_lo;		/* the device allocation last reached */
	size_t dev_len;
	bool running, failed, verbose, env_read, seed_set;
	const char *kname;
	uint64_t seed, rng, launches, blocks;
	uint32_t interval, blk;
	int reports;
	uint64_t checked, races;
	std::vector<srange *> ranges;	/* the __shared__ arrays, sorted by lo */
	std::vector<fsym> funcs;
	srange gap;			/* between two of them */
	srange *last;
	bool symtab;
	char first_report[512];
} S;

void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
void die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fprintf(stderr, "simt: fatal: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	abort();
}

/* A problem in the running kernel: print (the first few), fail the launch. */
void report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void report(const char *fmt, ...)
{
	char buf[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (!S.failed)
		snprintf(S.first_report, sizeof(S.first_report), "%s", buf);
	S.failed = true;
	if (S.reports++ < MAX_REPORTS)
		fprintf(stderr, "# simt: %s: %s (block %u,%u,%u)\n", S.kname, buf, blockIdx.x,
			blockIdx.y, blockIdx.z);
}

uint64_t splitmix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

unsigned int lin(const uint3 &t)
{
	return t.x + blockDim.x * (t.y + blockDim.y * t.z);
}

/* ---- fibers ---- */

[[noreturn]] void fiber_entry();

void *initial_frame(thr *f)
{
	/* After the switch's 8-byte slot, six registers and `ret`, rsp is top - 8:
	 * what a call leaves at a function's entry. */
	uintptr_t top = ((uintptr_t)f->stack + STACK_BYTES) & ~(uintptr_t)15;
	uint64_t *fr = (uint64_t *)(top - 72);

	memset(fr, 0, 72);
	fr[7] = (uint64_t)(uintptr_t)&fiber_entry;
	return fr;
}

void make_runnable(unsigned int i)
{
	S.t[i].st = T_RUN;
	S.runbits[i >> 5] |= 1u << (i & 31);
}

void switch_to(thr *from, thr *to)
{
	S.cur = to;
	threadIdx = to->tid;
	kv_simt_switch(&from->sp, to->sp);
}

/* The running thread waits (or exited): run the round's next, or go back. */
void yield_to_next()
{
	thr *me = S.cur;

	if (S.pos < S.runq.size())
		switch_to(me, &S.t[S.runq[S.pos++]]);
	else
		kv_simt_switch(&me->sp, S.main_sp);
}

void fiber_entry()
{
	unsigned int w;

	S.thunk(S.ctx);
	S.cur->st = T_EXIT;
	w = lin(S.cur->tid) / 32;
	S.n_live--;
	/* Its warp may now have every live lane at a collective. */
	if (--S.warp_live[w] && S.warp_wait[w] == S.warp_live[w])
		S.ready.push_back(w);
	yield_to_next();
	die("an exited thread was resumed");
}

void ensure_fibers(unsigned int n)
{
	long pg = sysconf(_SC_PAGESIZE);

	while (S.t.size() < n) {
		thr f = {};
		void *m = mmap(NULL, STACK_BYTES + pg, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

		if (m == MAP_FAILED)
			die("no memory for a thread stack");
		/* A guard page below the stack: an overflow faults. */
		if (mprotect(m, pg, PROT_NONE))
			die("mprotect");
		f.stack = (char *)m + pg;
		S.t.push_back(f);
	}
}

/* ---- warp collectives and barriers ---- */

const char *coll_name(coll_kind k)
{
	static const char *const names[] = { "__shfl_sync", "__shfl_up_sync", "__shfl_down_sync",
					     "__shfl_xor_sync", "__ballot_sync", "__any_sync",
					     "__all_sync", "__syncwarp", "mma.sync.m16n8k16",
					     "ldmatrix.sync.m8n8.x4" };
	return names[k];
}

float mma_elem(mma_type t, uint32_t reg, int half)
{
	unsigned short h = (unsigned short)(reg >> (16 * half));

	return t == MMA_BF16 ? __uint_as_float((uint32_t)h << 16) : kv_simt_f16_to_f32(h);
}

/*
 * D = A B + C for the warp from @w0, every lane's fragments as the PTX ISA
 * lays them out for m16n8k16 (groupID = lane >> 2, threadID_in_group =
 * lane % 4):
 *   A, a0..a7 (two per register): row groupID, +8 for a2,a3,a6,a7;
 *      column 2 threadID_in_group + (i & 1), +8 for a4..a7;
 *   B, b0..b3: row (k) 2 threadID_in_group + (i & 1), +8 for b2,b3;
 *      column (n) groupID;
 *   C, D, c0..c3: row groupID, +8 for c2,c3; column 2 threadID_in_group + (i & 1).
 * Products of 16-bit floats are exact in double, and so is the sum of 16;
 * the result is rounded once to f32 (a tensor core may round differently
 * in the last bit).
 */
void mma_complete(unsigned int w0)
{
	mma_type t = (mma_type)S.t[w0].arg;
	float A[16][16], B[16][8], C[16][8];
	unsigned int l;
	int i, r, c, k;

	for (l = 0; l < 32; l++) {
		const mma_frag *f = (const mma_frag *)(uintptr_t)S.t[w0 + l].val;
		int g = (int)l >> 2, tg = (int)l & 3;

		for (i = 0; i < 8; i++)
			A[g + (i & 2 ? 8 : 0)][2 * tg + (i & 1) + (i & 4 ? 8 : 0)] =
				mma_elem(t, f->a[i / 2], i & 1);
		for (i = 0; i < 4; i++)
			B[2 * tg + (i & 1) + (i & 2 ? 8 : 0)][g] = mma_elem(t, f->b[i / 2], i & 1);
		for (i = 0; i < 4; i++)
			C[g + (i & 2 ? 8 : 0)][2 * tg + (i & 1)] = f->c[i];
	}
	for (l = 0; l < 32; l++) {
		mma_frag *f = (mma_frag *)(uintptr_t)S.t[w0 + l].val;
		int g = (int)l >> 2, tg = (int)l & 3;

		for (i = 0; i < 4; i++) {
			double acc;

			r = g + (i & 2 ? 8 : 0);
			c = 2 * tg + (i & 1);
			acc = C[r][c];
			for (k = 0; k < 16; k++)
				acc += (double)A[r][k] * B[k][c];
			f->d[i] = (float)acc;
		}
	}
}

void check_shared(srange *r, uintptr_t a, size_t n, bool write);
srange *classify(uintptr_t a);

/*
 * The warp's ldmatrix.x4: lane 8i + k's address is row k of matrix i; the
 * 16-byte row reads are checked as that lane's.
 */
void ldmatrix_complete(unsigned int w0)
{
	bool trans = S.t[w0].arg != 0;
	uint16_t M[4][8][8];
	thr *cur = S.cur;
	unsigned int l;
	int i;

	for (l = 0; l < 32; l++) {
		const ldm_frag *f = (const ldm_frag *)(uintptr_t)S.t[w0 + l].val;
		uintptr_t a = (uintptr_t)f->row;
		srange *r = classify(a);

		S.cur = &S.t[w0 + l];
		if (a % 16 || !r->shared || a + 16 > r->hi) {
			report("ldmatrix at %s:%d: lane %u's row address %#lx is not 16 aligned bytes of a __shared__ array",
			       S.t[w0].file, S.t[w0].line, l, (unsigned long)a);
			memset(M[l / 8][l % 8], 0, 16);
			continue;
		}
		check_shared(r, a, 16, false);
		memcpy(M[l / 8][l % 8], f->row, 16);
	}
	S.cur = cur;
	for (l = 0; l < 32; l++) {
		ldm_frag *f = (ldm_frag *)(uintptr_t)S.t[w0 + l].val;
		unsigned int g = l / 4, c = 2 * (l % 4);

		for (i = 0; i < 4; i++)
			f->r[i] = trans ? (uint32_t)M[i][c][g] | (uint32_t)M[i][c + 1][g] << 16
					: (uint32_t)M[i][g][c] | (uint32_t)M[i][g][c + 1] << 16;
	}
}

/* Complete the collective lane @l of warp base @w0 waits at, if all its mask waits there. */
bool try_complete(unsigned int w0, unsigned int l)
{
	thr &a = S.t[w0 + l];
	unsigned int mask = a.mask, i;
	uint64_t ballot = 0;

	for (i = 0; i < 32; i++) {
		if (!(mask >> i & 1))
			continue;
		if (w0 + i >= S.n || S.t[w0 + i].st == T_EXIT) {
			report("%s at %s:%d: mask %#x names thread %u, which %s", coll_name(a.kind),
			       a.file, a.line, mask, w0 + i,
			       w0 + i >= S.n ? "does not exist" : "has exited");
			return false;
		}
		thr &b = S.t[w0 + i];

		if (b.st != T_COLL || b.kind != a.kind || b.file != a.file || b.line != a.line)
			return false;	/* not there (yet): a deadlock if it never comes */
		if (b.mask != mask) {
			report("%s at %s:%d: lanes %u and %u pass different masks (%#x, %#x)",
			       coll_name(a.kind), a.file, a.line, l, i, mask, b.mask);
			return false;
		}
		if (b.arg != a.arg && (a.kind == COLL_MMA || a.kind == COLL_LDMATRIX)) {
			report("%s at %s:%d: lanes %u and %u pass different operand types or shapes",
			       coll_name(a.kind), a.file, a.line, l, i);
			return false;
		}
		ballot |= (uint64_t)(b.val != 0) << i;
	}
	if (a.kind == COLL_MMA)
		mma_complete(w0);
	if (a.kind == COLL_LDMATRIX)
		ldmatrix_complete(w0);
	for (i = 0; i < 32; i++) {
		if (!(mask >> i & 1))
			continue;
		thr &b = S.t[w0 + i];
		int w = b.width, seg = (int)i & ~(w - 1), src = (int)i;

		switch (b.kind) {
		case COLL_SHFL:
			src = seg + (b.arg & (w - 1));
			break;
		case COLL_SHFL_UP:
			src = (int)i - b.arg >= seg ? (int)i - b.arg : (int)i;
			break;
		case COLL_SHFL_DOWN:
			src = (int)i + b.arg < seg + w ? (int)i + b.arg : (int)i;
			break;
		case COLL_SHFL_XOR:
			src = (int)i ^ b.arg;
			src = src < seg + w ? src : (int)i;
			break;
		case COLL_BALLOT:
			b.res = ballot;
			break;
		case COLL_ANY:
			b.res = ballot != 0;
			break;
		case COLL_ALL:
			b.res = ballot == mask;
			break;
		case COLL_SYNCWARP:
		case COLL_MMA:
		case COLL_LDMATRIX:
			b.res = 0;
			break;
		}
		if (b.kind <= COLL_SHFL_XOR) {
			if (src < 0 || src > 31 || !(mask >> src & 1)) {
				report("%s at %s:%d: lane %u reads lane %d, outside the mask %#x",
				       coll_name(b.kind), b.file, b.line, i, src, mask);
				b.res = b.val;
			} else {
				b.res = S.t[w0 + src].val;
			}
		}
	}
	for (i = 0; i < 32; i++)
		if (mask >> i & 1)
			make_runnable(w0 + i);
	S.warp_wait[w0 / 32] -= __builtin_popcount(mask);
	return true;
}

bool resolve_collectives()
{
	bool progress = false;
	unsigned int w0, l;

	for (w0 = 0; w0 < S.n && !S.failed; w0 += 32)
		for (l = 0; l < 32 && w0 + l < S.n && !S.failed; l++)
			if (S.t[w0 + l].st == T_COLL && try_complete(w0, l))
				progress = true;
	return progress;
}

/* The fast path: the warps that became complete this round. */
bool resolve_ready()
{
	bool progress = false;

	for (unsigned int w : S.ready) {
		unsigned int w0 = w * 32, l;

		if (!S.warp_wait[w] || S.warp_wait[w] != S.warp_live[w])
			continue;
		for (l = 0; l < 32 && w0 + l < S.n && !S.failed; l++)
			if (S.t[w0 + l].st == T_COLL && try_complete(w0, l))
				progress = true;
	}
	S.ready.clear();
	return progress;
}

void shuffle_runq()
{
	size_t i;

	if (!S.seed)
		return;
	for (i = S.runq.size(); i > 1; i--) {
		size_t j;

		S.rng = splitmix(S.rng);
		j = S.rng % i;
		std::swap(S.runq[i - 1], S.runq[j]);
	}
}

void describe_deadlock()
{
	const thr *prev = NULL;
	unsigned int i, shown = 0;

	report("deadlock or divergence: no thread can go on");
	/* Where the threads wait, one line per run of threads at one place. */
	for (i = 0; i < S.n && shown < 8; i++) {
		const thr &t = S.t[i];

		if (t.st == T_EXIT || (prev && t.st == prev->st && t.file == prev->file &&
				       t.line == prev->line))
			continue;
		prev = &t;
		shown++;
		fprintf(stderr, "# simt:   thread %u (and the next at the same place) waits at %s %s:%d\n",
			i, t.st == T_BAR ? "__syncthreads" : coll_name(t.kind), t.file, t.line);
	}
}

/* The shared words a copy will write: no longer pending. */
void cp_unmark(const cp_pend &p)
{
	srange *r = classify((uintptr_t)p.dst);
	size_t w;

	if (!r->shared)
		return;
	for (w = ((uintptr_t)p.dst - r->lo) / 4; w <= ((uintptr_t)p.dst + p.n - 1 - r->lo) / 4; w++)
		r->sh[w].pending = false;
}

/* Copies a thread left in flight when its block ended land nowhere. */
void cp_drop_all()
{
	for (thr &t : S.t) {
		for (const cp_pend &p : t.cp)
			cp_unmark(p);
		t.cp.clear();
		t.cp_groups = 0;
	}
}

void run_block()
{
	unsigned int i, k;

	cp_drop_all();

	S.interval++;
	S.blk++;
	S.blocks++;
	S.rng = splitmix(S.seed ^ splitmix(S.launches * 0x10001ull + S.blocks));
	memset(S.runbits, 0, sizeof(S.runbits));
	memset(S.warp_wait, 0, sizeof(S.warp_wait));
	S.ready.clear();
	S.n_live = S.n;
	S.n_bar = 0;
	for (i = 0; i < S.n; i++) {
		thr &t = S.t[i];

		t.tid.x = i % blockDim.x;
		t.tid.y = i / blockDim.x % blockDim.y;
		t.tid.z = i / (blockDim.x * blockDim.y);
		t.sp = initial_frame(&t);
		make_runnable(i);
	}
	for (i = 0; i < S.n; i += 32)
		S.warp_live[i / 32] = (uint16_t)std::min(32u, S.n - i);
	for (;;) {
		S.runq.clear();
		for (k = 0; k < (S.n + 31) / 32; k++) {
			uint32_t b = S.runbits[k];

			S.runbits[k] = 0;
			for (; b; b &= b - 1)
				S.runq.push_back(k * 32 + __builtin_ctz(b));
		}
		if (!S.runq.empty()) {
			thr *f;

			shuffle_runq();
			f = &S.t[S.runq[0]];
			S.pos = 1;
			S.cur = f;
			threadIdx = f->tid;
			kv_simt_switch(&S.main_sp, f->sp);
			continue;
		}
		/* Everyone waits or has exited: complete what can be. */
		if (resolve_ready() || resolve_collectives())
			continue;
		if (S.failed || !S.n_live)
			return;		/* a report, or the block is done */
		if (S.n_bar != S.n_live) {
			describe_deadlock();
			return;
		}
		/* Every live thread waits at a barrier: the same one, or divergence. */
		{
			const thr *first = NULL;

			for (i = 0; i < S.n; i++) {
				const thr &t = S.t[i];

				if (t.st != T_BAR)
					continue;
				if (first && (t.file != first->file || t.line != first->line)) {
					describe_deadlock();
					return;
				}
				first = first ? first : &t;
			}
		}
		for (i = 0; i < S.n; i++)
			if (S.t[i].st == T_BAR)
				make_runnable(i);
		S.n_bar = 0;
		S.interval++;
	}
}

/* ---- the shared-memory checker ---- */

int main_bias(struct dl_phdr_info *info, size_t size, void *data)
{
	(void)size;
	*(uintptr_t *)data = info->dlpi_addr;
	return 1;			/* the first object is the executable */
}

/*
 * The executable's __shared__ arrays, from its symbol table (.symtab: a
 * kernel's static is a local symbol when the kernel is not a template,
 * which the dynamic symbols never show).  A function-local static object
 * (_ZZ...) reached by a kernel thread can only be a __shared__ array:
 * device code has no other, and the stand-in's own code is not
 * instrumented.
 */
void load_shared_ranges()
{
	const ElfW(Ehdr) *eh;
	const ElfW(Shdr) *sh;
	uintptr_t bias = 0;
	struct stat st;
	const char *f;
	unsigned int i;
	int fd;

	dl_iterate_phdr(main_bias, &bias);
	fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st))
		die("cannot read /proc/self/exe: %s", strerror(errno));
	f = (const char *)mmap(NULL, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (f == MAP_FAILED)
		die("cannot map /proc/self/exe");
	eh = (const ElfW(Ehdr) *)f;
	sh = (const ElfW(Shdr) *)(f + eh->e_shoff);
	for (i = 0; i < eh->e_shnum; i++) {
		const ElfW(Sym) *sym = (const ElfW(Sym) *)(f + sh[i].sh_offset);
		const char *names = f + sh[sh[i].sh_link].sh_offset;
		size_t k, n = sh[i].sh_size / sizeof(*sym);

		if (sh[i].sh_type != SHT_SYMTAB)
			continue;
		for (k = 0; k < n; k++) {
			const char *nm = names + sym[k].st_name;
			srange *r;
			char *dm;

			if (ELF64_ST_TYPE(sym[k].st_info) == STT_FUNC && !strncmp(nm, "_Z", 2))
				S.funcs.push_back(fsym{ bias + sym[k].st_value, nm });
			if (ELF64_ST_TYPE(sym[k].st_info) != STT_OBJECT || !sym[k].st_size ||
			    strncmp(nm, "_ZZ", 3))
				continue;
			r = new srange();
			r->lo = bias + sym[k].st_value;
			r->hi = r->lo + sym[k].st_size;
			r->shared = true;
			dm = abi::__cxa_demangle(nm, NULL, NULL, NULL);
			r->name = dm ? dm : nm;
			r->mangled = nm;
			free(dm);
			r->sh.assign((sym[k].st_size + 3) / 4, shadow{ 0, 0, 0, 0, 0, false, false });
			S.ranges.push_back(r);
		}
		S.symtab = true;
	}
	munmap((void *)f, st.st_size);
	if (!S.symtab)
		die("the executable has no symbol table (stripped?): the checker needs it");
	std::sort(S.ranges.begin(), S.ranges.end(),
		  [](const srange *a, const srange *b) { return a->lo < b->lo; });
	/* One symbol twice (aliases): keep one. */
	S.ranges.erase(std::unique(S.ranges.begin(), S.ranges.end(),
				   [](const srange *a, const srange *b) { return a->lo == b->lo; }),
		       S.ranges.end());
}

/* The shared array holding @a, or the gap around it (not shared). */
srange *classify(uintptr_t a)
{
	auto it = std::upper_bound(S.ranges.begin(), S.ranges.end(), a,
				   [](uintptr_t x, const srange *r) { return x < r->lo; });
	srange *r;

	if (it != S.ranges.begin() && a < (*(it - 1))->hi)
		return *(it - 1);
	r = &S.gap;
	r->lo = it != S.ranges.begin() ? (*(it - 1))->hi : 0;
	r->hi = it != S.ranges.end() ? (*it)->lo : UINTPTR_MAX;
	r->shared = false;
	return r;
}

void tid_str(char *buf, size_t len, uint16_t t, bool others = false)
{
	snprintf(buf, len, "thread %u (%u,%u,%u)%s", t, t % blockDim.x,
		 t / blockDim.x % blockDim.y, t / (blockDim.x * blockDim.y),
		 others ? " (and others)" : "");
}

/* @a did @va to a word, then @b did @vb, in one barrier interval. */
void race(const srange *r, size_t word, const char *va, uint16_t a, const char *vb, uint16_t b,
	  bool others = false)
{
	char ta[64], tb[64];

	S.races++;
	tid_str(ta, sizeof(ta), a, others);
	if (a == b)
		snprintf(ta, sizeof(ta), "other threads");
	tid_str(tb, sizeof(tb), b);
	report("shared-memory race on %s, byte offset %zu: %s by %s, then %s by %s, "
	       "with no barrier between", r->name.c_str(), word * 4, va, ta, vb, tb);
}

void check_shared(srange *r, uintptr_t a, size_t n, bool write)
{
	uint16_t me;
	size_t w, w0, w1;

	S.checked++;
	me = (uint16_t)lin(S.cur->tid);
	if (a + n > r->hi) {
		report("%zu-byte access at byte offset %zu of %s (%zu bytes) runs past its end",
		       n, (size_t)(a - r->lo), r->name.c_str(), (size_t)(r->hi - r->lo));
		n = r->hi - a;
	}
	w0 = (a - r->lo) / 4;
	w1 = (a + n - 1 - r->lo) / 4;
	for (w = w0; w <= w1; w++) {
		shadow &s = r->sh[w];

		if (s.pending) {
			char t[64];

			tid_str(t, sizeof(t), me);
			report("%s %s %s at byte offset %zu, which a cp.async not yet waited for "
			       "(cp.async.wait_group) will write", t, write ? "writes" : "reads",
			       r->name.c_str(), w * 4);
		}
		if (write) {
			if (s.w_int == S.interval && s.writer != me)
				race(r, w, "written", s.writer, "written", me);
			else if (s.r_int == S.interval && (s.reader != me || s.many))
				race(r, w, "read", s.reader, "written", me, s.many);
			s.w_int = S.interval;
			s.writer = me;
			s.blk = S.blk;
		} else {
			if (s.blk != S.blk) {
				char t[64];

				tid_str(t, sizeof(t), me);
				report("%s reads %s at byte offset %zu, which no thread of the block wrote",
				       t, r->name.c_str(), w * 4);
			} else if (s.w_int == S.interval && s.writer != me) {
				race(r, w, "written", s.writer, "read", me);
			}
			if (s.r_int != S.interval) {
				s.r_int = S.interval;
				s.reader = me;
				s.many = false;
			} else if (s.reader != me) {
				s.many = true;
			}
		}
	}
}

/*
 * Every load and store of a kernel unit comes here: most are global or
 * stack memory, outside the executable's image, and leave at once.
 */
/* Outside the image, the stack and the parameters: device memory, or a bug. */
__attribute__((noinline)) void check_global(uintptr_t a, size_t n, bool write)
{
	uintptr_t lo;
	size_t len;
	char t[64];

	if (a - (uintptr_t)S.ctx < S.ctx_size)
		return;				/* the launch's parameters */
	if (device_range((const void *)a, &lo, &len) && a - lo + n <= len) {
		S.dev_lo = lo;
		S.dev_len = len;
		return;
	}
	tid_str(t, sizeof(t), (uint16_t)lin(S.cur->tid));
	if (device_range((const void *)a, &lo, &len) && a - lo < len + 65536)
		report("illegal address: %s %s %zu bytes at offset %zu of a %zu-byte device allocation, past its end",
		       t, write ? "writes" : "reads", n, (size_t)(a - lo), len);
	else
		report("illegal address: %s %s %zu bytes at %#lx, in no device allocation",
		       t, write ? "writes" : "reads", n, (unsigned long)a);
}

/*
 * Every load and store of a kernel unit comes here: most are device
 * memory (the allocation last reached) or the thread's stack, and leave
 * at once.
 */
__attribute__((always_inline)) inline void check(uintptr_t a, size_t n, bool write)
{
	srange *r;

	if (!S.running)
		return;
	if (__builtin_expect(a - (uintptr_t)__executable_start >=
			     (uintptr_t)_end - (uintptr_t)__executable_start, 1)) {
		if (a - S.dev_lo + n <= S.dev_len ||
		    a - (uintptr_t)S.cur->stack < STACK_BYTES)
			return;
		check_global(a, n, write);
		return;
	}
	r = S.last;
	if (!r || a < r->lo || a >= r->hi)
		S.last = r = classify(a);
	if (r->shared)
		check_shared(r, a, n, write);
}

} /* namespace */

uint64_t collective(coll_kind kind, unsigned int mask, uint64_t v, int arg, int width,
		    const char *file, int line)
{
	thr *me = S.cur;
	unsigned int l;

	if (!S.running)
		die("%s called outside a kernel (%s:%d)", coll_name(kind), file, line);
	l = lin(me->tid) % 32;
	if (!(mask >> l & 1)) {
		report("%s at %s:%d: lane %u calls it with a mask %#x without itself",
		       coll_name(kind), file, line, l, mask);
		mask |= 1u << l;
	}
	if (width < 1 || width > 32 || (width & (width - 1)))
		report("%s at %s:%d: width %d is not a power of two up to 32", coll_name(kind),
		       file, line, width);
	me->st = T_COLL;
	me->kind = kind;
	me->mask = mask;
	me->val = v;
	me->arg = arg;
	me->width = width >= 1 && width <= 32 && !(width & (width - 1)) ? width : 32;
	me->file = file;
	me->line = line;
	l = lin(me->tid) / 32;
	if (++S.warp_wait[l] == S.warp_live[l])
		S.ready.push_back(l);
	yield_to_next();
	return me->res;
}

void syncthreads(const char *file, int line)
{
	thr *me = S.cur;

	if (!S.running)
		die("__syncthreads called outside a kernel (%s:%d)", file, line);
	me->st = T_BAR;
	me->file = file;
	me->line = line;
	S.n_bar++;
	yield_to_next();
}

void mma_m16n8k16(mma_type t, mma_frag *f, const char *file, int line)
{
	/* .aligned: every lane of the warp executes the same mma. */
	collective(COLL_MMA, 0xffffffffu, (uint64_t)(uintptr_t)f, (int)t, 32, file, line);
}

void ldmatrix_x4(bool trans, ldm_frag *f, const char *file, int line)
{
	collective(COLL_LDMATRIX, 0xffffffffu, (uint64_t)(uintptr_t)f, trans, 32, file, line);
}

void cp_async(void *dst, const void *src, unsigned int bytes, unsigned int src_bytes,
	      const char *file, int line)
{
	uintptr_t d = (uintptr_t)dst, lo;
	size_t len, w;
	cp_pend p;
	srange *r;

	if (!S.running)
		die("cp.async called outside a kernel (%s:%d)", file, line);
	if ((bytes != 4 && bytes != 8 && bytes != 16) || src_bytes > bytes || d % bytes ||
	    (uintptr_t)src % bytes) {
		report("cp.async at %s:%d: %u bytes (%u read) to %#lx from %#lx: the size must be 4, 8 or 16, "
		       "the addresses aligned to it", file, line, bytes, src_bytes, (unsigned long)d,
		       (unsigned long)(uintptr_t)src);
		return;
	}
	r = classify(d);
	if (!r->shared || d + bytes > r->hi) {
		report("cp.async at %s:%d: destination %#lx is not in a __shared__ array", file, line,
		       (unsigned long)d);
		return;
	}
	if (src_bytes && !(device_range(src, &lo, &len) &&
			   (uintptr_t)src - lo + src_bytes <= len)) {
		report("illegal address: cp.async at %s:%d reads %u bytes at %#lx, in no device allocation",
		       file, line, src_bytes, (unsigned long)(uintptr_t)src);
		return;
	}
	/* As a write now: a race with this interval's other accesses. */
	check_shared(r, d, bytes, true);
	p.dst = (char *)dst;
	p.n = bytes;
	p.group = CP_OPEN;
	memset(p.data, 0, sizeof(p.data));
	memcpy(p.data, src, src_bytes);		/* the rest is zero-filled */
	for (w = (d - r->lo) / 4; w <= (d + bytes - 1 - r->lo) / 4; w++)
		r->sh[w].pending = true;
	S.cur->cp.push_back(p);
}

void cp_async_commit(void)
{
	thr *me = S.cur;

	if (!S.running)
		die("cp.async.commit_group called outside a kernel");
	for (cp_pend &p : me->cp)
		if (p.group == CP_OPEN)
			p.group = me->cp_groups;
	me->cp_groups++;		/* an empty group is a group too */
}

void cp_async_wait(int n, const char *file, int line)
{
	thr *me = S.cur;
	size_t i, keep = 0;

	if (!S.running)
		die("cp.async.wait_group called outside a kernel (%s:%d)", file, line);
	if (n < 0) {
		report("cp.async.wait_group %d at %s:%d: N must be >= 0", n, file, line);
		return;
	}
	/* Retire, in issue order, every committed group but the newest n. */
	for (i = 0; i < me->cp.size(); i++) {
		cp_pend &p = me->cp[i];

		if (p.group != CP_OPEN && p.group + (uint32_t)n < me->cp_groups) {
			srange *r = classify((uintptr_t)p.dst);

			cp_unmark(p);
			memcpy(p.dst, p.data, p.n);
			check_shared(r, (uintptr_t)p.dst, p.n, true);
		} else {
			me->cp[keep++] = p;
		}
	}
	me->cp.resize(keep);
}

int occupancy(const void *kernel, int block_threads, size_t dyn_smem)
{
	const fsym *f = NULL;
	std::string prefix;
	size_t smem = dyn_smem;
	int warps = (block_threads + 31) / 32, n = 32;

	if (!S.symtab)
		load_shared_ranges();
	for (const fsym &x : S.funcs)
		if (x.addr == (uintptr_t)kernel)
			f = &x;
	if (!f)
		die("cudaOccupancyMaxActiveBlocksPerMultiprocessor: %p is no function of the executable",
		    kernel);
	/* A function's static locals are _ZZ<its encoding>E<name>. */
	prefix = "_ZZ" + f->mangled.substr(2) + "E";
	for (const srange *r : S.ranges)
		if (!r->mangled.compare(0, prefix.size(), prefix))
			smem += r->hi - r->lo;
	if (smem > 227 * 1024)
		return 0;
	n = std::min(n, 64 / warps);				/* 2048 threads */
	n = std::min(n, 65536 / (64 * 32 * warps));		/* 64 registers a thread */
	n = std::min(n, (int)(228 * 1024 / (((smem + 127) & ~(size_t)127) + 1024)));
	return n;
}

const char *launch_report(void)
{
	return S.first_report;
}

void set_seed(uint64_t seed)
{
	S.seed = seed;
	S.seed_set = true;
}

void launch(const char *name, dim3 grid, dim3 block, size_t smem, cudaStream_t s,
	    void (*thunk)(void *), void *ctx, size_t ctx_size)
{
	unsigned int x, y, z;
	uint64_t threads = (uint64_t)block.x * block.y * block.z;

	(void)s;
	if (S.running)
		die("a launch from inside a kernel (%s): not modelled", name);
	if (!S.env_read) {
		const char *e = getenv("KV_SIMT_SEED");

		if (!S.seed_set)
			S.seed = e ? strtoull(e, NULL, 0) : 0;
		e = getenv("KV_SIMT_VERBOSE");
		S.verbose = e && *e == '1';
		S.env_read = true;
	}
	/* The driver's launch limits. */
	if (!threads || threads > 1024 || block.x > 1024 || block.y > 1024 || block.z > 64 ||
	    !grid.x || !grid.y || !grid.z || grid.x > 0x7fffffffu || grid.y > 65535 ||
	    grid.z > 65535 || smem > 48 * 1024) {
		record_error(cudaErrorInvalidConfiguration, false);
		return;
	}
	ensure_fibers((unsigned int)threads);
	if (!S.symtab)
		load_shared_ranges();
	S.last = NULL;
	S.n = (unsigned int)threads;
	S.thunk = thunk;
	S.ctx = ctx;
	S.ctx_size = ctx_size;
	S.dev_lo = S.dev_len = 0;
	S.kname = name;
	S.failed = false;
	S.reports = 0;
	S.launches++;
	S.running = true;
	blockDim = block;
	gridDim = grid;
	for (z = 0; z < grid.z && !S.failed; z++)
		for (y = 0; y < grid.y && !S.failed; y++)
			for (x = 0; x < grid.x && !S.failed; x++) {
				blockIdx.x = x;
				blockIdx.y = y;
				blockIdx.z = z;
				run_block();
			}
	S.running = false;
	S.cur = NULL;
	if (S.verbose)
		fprintf(stderr, "# simt: %s grid (%u,%u,%u) block (%u,%u,%u): %llu shared accesses checked so far\n",
			name, grid.x, grid.y, grid.z, block.x, block.y, block.z,
			(unsigned long long)S.checked);
	threadIdx = uint3{ 0, 0, 0 };
	if (S.failed) {
		if (S.reports > MAX_REPORTS)
			fprintf(stderr, "# simt: %s: %d more reports not shown\n", name,
				S.reports - MAX_REPORTS);
		record_error(cudaErrorLaunchFailure, true);
	}
}

} /* namespace kv_simt */

/* ---- ThreadSanitizer's hooks: the instrumentation only, no libtsan ---- */
#define KV_SIMT_HOOKS(n)								\
	extern "C" void __tsan_read##n(void *p)						\
	{ kv_simt::check((uintptr_t)p, n, false); }					\
	extern "C" void __tsan_write##n(void *p)					\
	{ kv_simt::check((uintptr_t)p, n, true); }					\
	extern "C" void __tsan_unaligned_read##n(void *p)				\
	{ kv_simt::check((uintptr_t)p, n, false); }					\
	extern "C" void __tsan_unaligned_write##n(void *p)				\
	{ kv_simt::check((uintptr_t)p, n, true); }
KV_SIMT_HOOKS(1)
KV_SIMT_HOOKS(2)
KV_SIMT_HOOKS(4)
KV_SIMT_HOOKS(8)
KV_SIMT_HOOKS(16)

extern "C" void __tsan_read_range(void *p, unsigned long n)
{
	kv_simt::check((uintptr_t)p, n, false);
}

extern "C" void __tsan_write_range(void *p, unsigned long n)
{
	kv_simt::check((uintptr_t)p, n, true);
}

extern "C" void __tsan_init(void) {}
extern "C" void __tsan_func_entry(void *pc) { (void)pc; }
extern "C" void __tsan_func_exit(void) {}
extern "C" void __tsan_vptr_update(void **p, void *v) { (void)p; (void)v; }
extern "C" void __tsan_vptr_read(void **p) { (void)p; }
