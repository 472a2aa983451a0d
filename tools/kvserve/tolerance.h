/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Comparing what the CUDA kernels served with the C reference's recompute
 * (kvserve --memory cuda): the kernels reduce in another order and take
 * fp16/bf16 tensors, so the two agree within tests/attn's tolerances, not
 * to the bit.  The measure is tests/attn/attn_cuda_test.c's: the relative
 * Frobenius error, below 2e-3 for fp16 and 1e-2 for bf16.
 */
#ifndef KVSERVE_TOLERANCE_H
#define KVSERVE_TOLERANCE_H

#include <stdbool.h>
#include <stdint.h>

/* Errors of a tensor against its reference, added up element by element. */
struct tol_err {
	double d2, r2;			/* sum of squared differences, of squared references */
	double max_abs;
	bool not_finite;
};

/* tests/attn's bound on the relative Frobenius error for @dtype. */
double tol_bound(uint32_t dtype);

/* @n elements of @dtype (the pool's) at @got against @ref. */
void tol_add_raw(struct tol_err *e, uint32_t dtype, const void *got, const void *ref,
		 uint32_t n);
void tol_add_f32(struct tol_err *e, const float *got, const float *ref, uint32_t n);

/* The relative Frobenius error; +Inf when anything was NaN or Inf. */
double tol_rel(const struct tol_err *e);

/*
 * A greedy token the kernels chose, @served, where the reference chose
 * @ref_tok from @logits: fine when the two were tied within the bound, as
 * an error of that size in the final state can swap them.
 */
bool tol_flip_ok(const float *logits, uint32_t ref_tok, uint32_t served, double bound);

#endif /* KVSERVE_TOLERANCE_H */
