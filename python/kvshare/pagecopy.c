// SPDX-License-Identifier: MIT
/*
 * Pool.copy_pages(): a batch of whole pages between the pool's mapping and
 * an engine's host memory, in one call, without the GIL, with streaming
 * stores (kvshare.sglang's batch_get_v1 / batch_set_v1).
 *
 * Why not memmove per piece: an engine page arrives as a few large pieces
 * (SGLang's page_first host pool: K and V, 1 MiB each at 32 layers x 8 kv
 * heads x 128 x 16 tokens).  glibc's memmove switches to non-temporal
 * stores only above a threshold (3/4 of the shared cache per thread, tens
 * of MiB on a server), so below it every destination line is first read
 * for ownership, then written back: three memory transfers for every two
 * of a streaming copy, and the copy runs at about 2/3 of a large memmove's
 * speed (measured: 7.4 against 12.9 GB/s).  The pages copied here are not
 * read again soon by this CPU (the host pool's next reader is the GPU's
 * DMA, the pool's another process), so caching the destination buys
 * nothing: pieces of PAGECOPY_STREAM_MIN bytes and more are stored with
 * non-temporal stores, smaller ones with memcpy.
 *
 * The stores are 32 bytes wide (AVX2): on a 2-vCPU EPYC, 256 MiB in 1 MiB
 * pieces moved at 15.1-16.1 GB/s, against 14.3-14.7 for one 256 MiB
 * memcpy (glibc's own non-temporal loop) and 13.6-13.9 with 16-byte SSE2
 * stores.  Four vectors (two lines) an iteration did best; eight did worse
 * (12-13 GB/s), and so did prefetching the source in software (the
 * hardware prefetcher already follows a linear read).
 *
 * The host addresses are the engine's (SGLang's get_page_buffer_meta): like
 * ctypes.memmove, this trusts them.  What is checked, before anything is
 * copied: every pool page exists, every page's pieces add up to exactly
 * one pool page, and no piece wraps around the address space.
 */
#include <string.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "pool.h"

/* Below this a piece is copied through the cache (memcpy). */
#define PAGECOPY_STREAM_MIN	4096

#if defined(__x86_64__)
/*
 * The body of a piece, from a 64-byte boundary of @dst on, with 32-byte
 * non-temporal stores: the bytes left, fewer than 128, are the caller's.
 * The caller fences (sfence) once, after the last piece.
 */
__attribute__((target("avx2")))
static size_t stream_avx2(char *dst, const char *src, size_t n)
{
	for (; n >= 128; n -= 128, dst += 128, src += 128) {
		__m256i a = _mm256_loadu_si256((const __m256i *)src);
		__m256i b = _mm256_loadu_si256((const __m256i *)(src + 32));
		__m256i c = _mm256_loadu_si256((const __m256i *)(src + 64));
		__m256i d = _mm256_loadu_si256((const __m256i *)(src + 96));

		_mm256_stream_si256((__m256i *)dst, a);
		_mm256_stream_si256((__m256i *)(dst + 32), b);
		_mm256_stream_si256((__m256i *)(dst + 64), c);
		_mm256_stream_si256((__m256i *)(dst + 96), d);
	}
	return n;
}

/*
 * Whether this CPU streams: every x86-64 server since 2013 has AVX2.  One
 * without copies every piece through memcpy, as small ones are.
 */
static int cpu_streams(void)
{
	return __builtin_cpu_supports("avx2");
}

/* memcpy(@dst, @src, @n) with non-temporal stores for the body. */
static void copy_stream(char *dst, const char *src, size_t n)
{
	size_t head = (64 - ((uintptr_t)dst & 63)) & 63, left;

	if (head) {
		memcpy(dst, src, head);
		dst += head;
		src += head;
		n -= head;
	}
	left = stream_avx2(dst, src, n);
	if (left)
		memcpy(dst + n - left, src + n - left, left);
}

static void copy_fence(void)
{
	_mm_sfence();
}
#else
static int cpu_streams(void)
{
	return 0;
}

static void copy_stream(char *dst, const char *src, size_t n)
{
	memcpy(dst, src, n);
}

static void copy_fence(void)
{
}
#endif

static void copy_piece(char *dst, const char *src, size_t n, int stream)
{
	if (stream && n >= PAGECOPY_STREAM_MIN)
		copy_stream(dst, src, n);
	else
		memcpy(dst, src, n);
}

/* A sequence of ints (a list, a tuple, a numpy array) as @n uint64_t. */
static uint64_t *u64s_from(PyObject *obj, const char *what, Py_ssize_t *n)
{
	PyObject *seq = PySequence_Fast(obj, "");
	uint64_t *out;

	if (!seq) {
		PyErr_Format(PyExc_TypeError, "%s: expected a sequence of ints, not %.100s",
			     what, Py_TYPE(obj)->tp_name);
		return NULL;
	}
	out = seq_uints(seq, what, sizeof(*out), n);
	Py_DECREF(seq);
	return out;
}

const char Pool_copy_pages__doc__[] = PyDoc_STR(
"copy_pages(pages, addrs, sizes, to_pool, stream=True)\n"
"\n"
"Copy whole pages between this pool and host memory, in one call without\n"
"the GIL, with streaming stores.  pages: n pool pages (uint32s); addrs and\n"
"sizes: the host pieces, per page per = len(addrs) // n of them in order,\n"
"whose sizes add up to page_bytes (SGLang's get_page_buffer_meta).\n"
"to_pool=True copies the pieces into the pages, False the pages into the\n"
"pieces.  stream=False copies through the cache (memcpy), for bytes this\n"
"CPU reads next (a CPU engine's attention, right after a load).\n"
"The caller holds the pages (OWNED from alloc, or referenced by\n"
"lookup).  Checked before anything is copied: IndexError for a page out\n"
"of range, ValueError for pieces that are not whole pages.");

PyObject *Pool_copy_pages(PoolObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "pages", "addrs", "sizes", "to_pool", "stream", NULL };
	PyObject *pages_o, *addrs_o, *sizes_o, *ret = NULL;
	uint64_t *addrs = NULL, *sizes = NULL, pb;
	Py_ssize_t n, na, ns, per, i, j;
	struct u32in pages;
	char *base;
	int to_pool, stream = 1;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOp|p:copy_pages", kwlist, &pages_o,
					 &addrs_o, &sizes_o, &to_pool, &stream))
		return NULL;
	POOL_OPEN(self, NULL);
	if (pool_is_device(self))
		return PyErr_Format(PyExc_ValueError, "copy_pages: pool '%U' is device memory; "
				    "the CPU cannot copy it", self->name);
	if (u32_from(pages_o, &pages, "pages"))
		return NULL;
	n = pages.n;
	if (check_batch(n, "copy_pages"))
		goto out;
	addrs = u64s_from(addrs_o, "addrs", &na);
	if (!addrs)
		goto out;
	sizes = u64s_from(sizes_o, "sizes", &ns);
	if (!sizes)
		goto out;
	if (na != ns || na % n || !na) {
		PyErr_Format(PyExc_ValueError, "copy_pages: %zd addrs and %zd sizes for %zd "
			     "pages: need the same count, a whole number of pieces per page",
			     na, ns, n);
		goto out;
	}
	per = na / n;
	pb = self->info.geom.page_bytes;
	for (i = 0; i < n; i++) {
		uint64_t sum = 0;

		if (pages.p[i] >= self->info.n_pages) {
			PyErr_Format(PyExc_IndexError, "copy_pages: page %u: the pool has %llu "
				     "pages", pages.p[i], (unsigned long long)self->info.n_pages);
			goto out;
		}
		for (j = i * per; j < (i + 1) * per; j++) {
			if (addrs[j] + sizes[j] < addrs[j] || sizes[j] > pb) {
				PyErr_Format(PyExc_ValueError, "copy_pages: piece %zd (%llu bytes "
					     "at %#llx) wraps or exceeds a page", j,
					     (unsigned long long)sizes[j],
					     (unsigned long long)addrs[j]);
				goto out;
			}
			sum += sizes[j];
		}
		if (sum != pb) {
			PyErr_Format(PyExc_ValueError, "copy_pages: page %zd's %zd pieces hold "
				     "%llu bytes; a page is %llu", i, per,
				     (unsigned long long)sum, (unsigned long long)pb);
			goto out;
		}
	}
	base = kv_page_addr(self->pool, 0);
	stream = stream && cpu_streams();
	self->busy++;
	Py_BEGIN_ALLOW_THREADS
	for (i = 0; i < n; i++) {
		char *page = base + (size_t)pages.p[i] * pb;

		for (j = i * per; j < (i + 1) * per; j++) {
			char *host = (char *)(uintptr_t)addrs[j];

			if (to_pool)
				copy_piece(page, host, sizes[j], stream);
			else
				copy_piece(host, page, sizes[j], stream);
			page += sizes[j];
		}
	}
	copy_fence();
	Py_END_ALLOW_THREADS
	self->busy--;
	ret = Py_NewRef(Py_None);
out:
	PyMem_Free(addrs);
	PyMem_Free(sizes);
	u32_release(&pages);
	return ret;
}
